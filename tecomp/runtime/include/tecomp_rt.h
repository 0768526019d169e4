/* tecomp_rt.h: the C ABI of a library that tecomp's Module.export_library writes.
 *
 * Include it with the directory tecomp.runtime.get_include() gives:
 *
 *   cc -I"$(python3 -c 'import tecomp.runtime as r; print(r.get_include())')" main.c -ldl
 *
 * A library is an ELF shared object; dlopen it (the *_fn pointer types below are what
 * dlsym gives), or link it (cc main.c ./kernels.so: the declarations below). Everything
 * here is described in docs/runtime.md, "Calling an exported kernel from C";
 * examples/aot/main.c uses it.
 *
 * A kernel built as tc.build(s, args, name="NAME") is exported as four functions, one
 * per call variant, all of type tecomp_kernel_fn:
 *
 *   tecomp_NAME                   contiguous arrays, no output overlapping an input
 *   tecomp_NAME_mayalias          contiguous, an input passed again as an output (the
 *                                 metadata's "in_place" pairs)
 *   tecomp_NAME_strided           any strides (read from the argument block)
 *   tecomp_NAME_strided_mayalias
 *
 * (NAME made an identifier: characters other than [A-Za-z0-9_] become '_'; the
 * metadata's "entry" is tecomp_NAME.) TECOMP_DECLARE_KERNEL(NAME) declares the four.
 *
 * The arguments of a call:
 *   data  the address of the first element of each buffer parameter, in parameter
 *         order (the metadata's params[].data_index), aligned to its element size;
 *   args  64-bit slots, the metadata's slots.count of them: one per scalar parameter
 *         in parameter order (an integer as its value, a bool as 0 or 1, a float of any
 *         width as the bits of a double: tecomp_slot_from_double), then one per shape
 *         variable that is not a parameter (slots.vars), then from each buffer's
 *         stride_slot one stride per dimension, in elements (read by the _strided
 *         variants only);
 *   err   TECOMP_ERR_WORDS words the kernel zeroes and, when it fails, fills as
 *         [code, site, dim, index, extent] (TECOMP_ERR_CODE ... TECOMP_ERR_EXTENT).
 * It returns TECOMP_OK (0) or the error code. The kernel trusts its arguments: the
 * checks tecomp's Python runtime makes (shapes, scalar bounds, overlaps) are the
 * caller's. Several threads may call a kernel at once, each with its own arrays.
 */
#ifndef TECOMP_RT_H
#define TECOMP_RT_H

#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* the metadata's "format" and the "format_version" this header describes */
#define TECOMP_AOT_FORMAT "tecomp-aot-library"
#define TECOMP_AOT_FORMAT_VERSION 2

/* the return value of a kernel, and err[TECOMP_ERR_CODE] */
#define TECOMP_OK 0
#define TECOMP_ERR_BOUNDS 1 /* a bounds check failed (a library built with checks=True):
                               err[SITE] indexes the variant's "sites" in the metadata,
                               err[DIM], err[INDEX], err[EXTENT] say which access */
#define TECOMP_ERR_MALLOC 2 /* a heap allocation failed: err[EXTENT] bytes (-1: the size
                               overflowed) */
#define TECOMP_ERR_ASSERT 3 /* a checked assertion failed: err[SITE] */
#define TECOMP_ERR_EXTERN 4 /* an extern stage's function raised: in the JIT only (an
                               exported library has no extern stage) */

/* the error words: their count, and the position of each */
#define TECOMP_ERR_WORDS 5
#define TECOMP_ERR_CODE 0
#define TECOMP_ERR_SITE 1
#define TECOMP_ERR_DIM 2
#define TECOMP_ERR_INDEX 3
#define TECOMP_ERR_EXTENT 4

/* every call variant of a kernel */
typedef int32_t (*tecomp_kernel_fn)(void **data, int64_t *args, int64_t *err);

/* the four variants of kernel NAME, for a program linked with its library (C linkage
   in C++ too, wherever the macro is used) */
#ifdef __cplusplus
#define TECOMP_EXTERN_C extern "C"
#else
#define TECOMP_EXTERN_C extern
#endif
#define TECOMP_DECLARE_KERNEL(NAME)                                                        \
    TECOMP_EXTERN_C int32_t tecomp_##NAME(void **data, int64_t *args, int64_t *err);      \
    TECOMP_EXTERN_C int32_t tecomp_##NAME##_mayalias(void **data, int64_t *args,          \
                                                     int64_t *err);                       \
    TECOMP_EXTERN_C int32_t tecomp_##NAME##_strided(void **data, int64_t *args,           \
                                                    int64_t *err);                        \
    TECOMP_EXTERN_C int32_t tecomp_##NAME##_strided_mayalias(void **data, int64_t *args,  \
                                                             int64_t *err)

/* the argument slot of a float scalar (float16, float32 or float64): a double's bits */
static inline int64_t tecomp_slot_from_double(double value) {
    int64_t slot;
    memcpy(&slot, &value, sizeof slot);
    return slot;
}

/* the metadata: a NUL-terminated JSON document in static storage (also the bytes of the
   library's .tecomp_meta section) */
const char *tecomp_metadata(void);
typedef const char *(*tecomp_metadata_fn)(void);

/* the library's thread pool, which runs its parallel loops (each library has its own) */
/* n >= 1 threads, the caller included; 0: the default */
void tecomp_pool_set_threads(int32_t n);
/* default: TECOMP_NUM_THREADS, else the CPUs of the affinity mask (no cgroup quota) */
int32_t tecomp_pool_get_threads(void);
/* worker threads running now */
int32_t tecomp_pool_num_workers(void);
/* pause iterations an idle worker spins before it sleeps (TECOMP_SPIN's) */
void tecomp_pool_set_spin(int64_t n);
/* pause iterations the caller spins for the last chunk (TECOMP_WAIT_SPIN's) */
void tecomp_pool_set_wait_spin(int64_t n);
/* join the workers (before dlclose); they restart on demand */
void tecomp_pool_shutdown(void);
/* in a fork()ed child, before its first call */
void tecomp_pool_after_fork(void);
/* free the workspace cache (kernel temporaries kept for reuse); the bytes freed */
int64_t tecomp_pool_ws_release(void);
/* keep at most n bytes of freed temporaries (default 1 GiB; 0 keeps none) */
void tecomp_pool_ws_set_limit(int64_t n);
/* bytes kept now */
int64_t tecomp_pool_ws_cached(void);

typedef void (*tecomp_pool_set_threads_fn)(int32_t n);
typedef int32_t (*tecomp_pool_get_threads_fn)(void);
typedef int32_t (*tecomp_pool_num_workers_fn)(void);
typedef void (*tecomp_pool_set_spin_fn)(int64_t n);
typedef void (*tecomp_pool_set_wait_spin_fn)(int64_t n);
typedef void (*tecomp_pool_shutdown_fn)(void);
typedef void (*tecomp_pool_after_fork_fn)(void);
typedef int64_t (*tecomp_pool_ws_release_fn)(void);
typedef void (*tecomp_pool_ws_set_limit_fn)(int64_t n);
typedef int64_t (*tecomp_pool_ws_cached_fn)(void);

#ifdef __cplusplus
}
#endif

#endif /* TECOMP_RT_H */
