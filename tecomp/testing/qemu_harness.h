/* tecomp.testing.qemu's harness: calls one entry of a library tecomp exported, on the
 * machine the library is for (under qemu-user on another).  C source kept as a .h so that
 * it ships as package data; tecomp.testing.qemu compiles it with the target's cross
 * compiler.
 *
 *   harness LIBRARY SYMBOL INPUT OUTPUT THREADS
 *
 * INPUT (little-endian): int64 nbuf, int64 nslots, int64 bytes[nbuf], int64 slots[nslots],
 *   then the bytes of each buffer in turn.
 * OUTPUT: int64 rc, int64 err[5], then the bytes of each buffer after the call.
 * The entry is   int32_t SYMBOL(void **data, int64_t *args, int64_t *err)
 * (docs/runtime.md, "Calling an exported kernel from C").  Exit status 0 when the call
 * was made (whatever it returned), 2 for a usage or I/O error, 3 when the library or
 * symbol cannot be loaded. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int32_t (*tecomp_kernel)(void **data, int64_t *args, int64_t *err);

static int read_all(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: %s LIBRARY SYMBOL INPUT OUTPUT THREADS\n", argv[0]);
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 3;
    }
    tecomp_kernel fn = (tecomp_kernel)dlsym(lib, argv[2]);
    void (*set_threads)(int32_t) = (void (*)(int32_t))dlsym(lib, "tecomp_pool_set_threads");
    if (!fn || !set_threads) {
        fprintf(stderr, "%s has no %s or no thread pool\n", argv[1], argv[2]);
        return 3;
    }
    set_threads((int32_t)atoi(argv[5]));
    FILE *in = fopen(argv[3], "rb");
    if (!in) {
        perror(argv[3]);
        return 2;
    }
    int64_t head[2];
    if (!read_all(in, head, sizeof head) || head[0] < 0 || head[1] < 0 || head[0] > 4096 ||
        head[1] > 65536) {
        fprintf(stderr, "%s: bad header\n", argv[3]);
        return 2;
    }
    int64_t nbuf = head[0], nslots = head[1];
    int64_t *bytes = calloc((size_t)nbuf + 1, sizeof(int64_t));
    int64_t *slots = calloc((size_t)nslots + 1, sizeof(int64_t));
    void **data = calloc((size_t)nbuf + 1, sizeof(void *));
    if (!bytes || !slots || !data || !read_all(in, bytes, nbuf * sizeof(int64_t)) ||
        !read_all(in, slots, nslots * sizeof(int64_t))) {
        fprintf(stderr, "%s: bad header\n", argv[3]);
        return 2;
    }
    for (int64_t k = 0; k < nbuf; k++) {
        size_t n = bytes[k] > 0 ? (size_t)bytes[k] : 0;
        /* 64-byte aligned, as numpy's large arrays are; at least one line */
        data[k] = aligned_alloc(64, ((n + 63) / 64 + 1) * 64);
        if (!data[k] || !read_all(in, data[k], n)) {
            fprintf(stderr, "%s: buffer %lld is short\n", argv[3], (long long)k);
            return 2;
        }
    }
    fclose(in);
    int64_t err[5] = {0, 0, 0, 0, 0};
    int64_t rc = fn(data, slots, err);
    FILE *out = fopen(argv[4], "wb");
    if (!out) {
        perror(argv[4]);
        return 2;
    }
    fwrite(&rc, sizeof rc, 1, out);
    fwrite(err, sizeof err, 1, out);
    for (int64_t k = 0; k < nbuf; k++)
        fwrite(data[k], 1, bytes[k] > 0 ? (size_t)bytes[k] : 0, out);
    return fclose(out) == 0 ? 0 : 2;
}
