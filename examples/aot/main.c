/* Call a kernel tecomp exported (examples/aot/export.py) from C.
 *
 *   python3 examples/aot/export.py /tmp/saxpy.so
 *   cc -O2 -I"$(python3 -c 'import tecomp.runtime as r; print(r.get_include())')" \
 *      -o /tmp/saxpy_main examples/aot/main.c -ldl -lm && /tmp/saxpy_main /tmp/saxpy.so
 *
 * The kernel was built as tc.build(s, [A, B, C, alpha], name="saxpy"):
 *   C[i] = alpha * A[i] + B[i],  A, B, C: float32[n],  alpha: float32.
 * Its entry is tecomp_saxpy, a tecomp_kernel_fn (tecomp_rt.h; docs/runtime.md,
 * "Calling an exported kernel from C"):
 *   data[k]  the data pointer of the k-th buffer parameter: A, B, C;
 *   args[]   one 64-bit slot per scalar parameter (alpha, stored as the bits of a
 *            double), then per shape variable that is no parameter (n), then the
 *            strides of every buffer in elements (read only by the _strided entries);
 *   err[]    TECOMP_ERR_WORDS words, filled when the kernel returns non-zero.
 */
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tecomp_rt.h"

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "./saxpy.so";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    tecomp_kernel_fn saxpy = (tecomp_kernel_fn)dlsym(lib, "tecomp_saxpy");
    tecomp_pool_get_threads_fn get_threads =
        (tecomp_pool_get_threads_fn)dlsym(lib, "tecomp_pool_get_threads");
    tecomp_pool_set_threads_fn set_threads =
        (tecomp_pool_set_threads_fn)dlsym(lib, "tecomp_pool_set_threads");
    tecomp_metadata_fn metadata = (tecomp_metadata_fn)dlsym(lib, "tecomp_metadata");
    if (!saxpy || !get_threads || !set_threads || !metadata) {
        fprintf(stderr, "%s is not the saxpy library export.py writes\n", path);
        return 1;
    }
    /* the metadata: a JSON document describing the parameters and the argument block */
    const char *meta = metadata();
    if (!strstr(meta, "\"format\":\"" TECOMP_AOT_FORMAT "\"") ||
        !strstr(meta, "\"name\":\"saxpy\"")) {
        fprintf(stderr, "unexpected metadata\n");
        return 1;
    }
    /* threads: TECOMP_NUM_THREADS or the online CPUs until told otherwise */
    printf("threads %d\n", (int)get_threads());
    set_threads(2);

    const int64_t n = 1000003;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    float *c = malloc(n * sizeof(float));
    if (!a || !b || !c)
        return 1;
    for (int64_t i = 0; i < n; i++) {
        a[i] = (float)(i % 1000) * 0.5f;
        b[i] = (float)(i % 7);
        c[i] = -1.0f;
    }
    float alpha = 2.0f;
    void *data[3] = {a, b, c};               /* A, B, C */
    int64_t args[5];
    args[0] = tecomp_slot_from_double(alpha); /* slot 0: alpha (float scalars travel as doubles) */
    args[1] = n;                             /* slot 1: n, the extent of A, B and C */
    args[2] = args[3] = args[4] = 1;         /* strides of A, B, C (unused by this entry) */
    int64_t err[TECOMP_ERR_WORDS] = {0};
    int32_t rc = saxpy(data, args, err);
    if (rc != TECOMP_OK) {
        fprintf(stderr, "tecomp_saxpy returned %d (site %lld, dim %lld, index %lld, extent %lld)\n",
                (int)rc, (long long)err[TECOMP_ERR_SITE], (long long)err[TECOMP_ERR_DIM],
                (long long)err[TECOMP_ERR_INDEX], (long long)err[TECOMP_ERR_EXTENT]);
        return 1;
    }
    for (int64_t i = 0; i < n; i++) {
        float want = alpha * a[i] + b[i];
        if (fabsf(c[i] - want) > 1e-6f * fabsf(want)) {
            fprintf(stderr, "c[%lld] = %g, expected %g\n", (long long)i, c[i], want);
            return 1;
        }
    }
    free(a);
    free(b);
    free(c);
    printf("OK\n");
    return 0;
}
