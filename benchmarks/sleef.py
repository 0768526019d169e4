"""SLEEF's vector math as a peer for benchmarks/elementwise_math.py.

A tiny C driver, compiled with gcc against ``sleef.h`` (Debian: ``apt-get install
libsleef-dev``), maps one SLEEF function over a float32 array with OpenMP on the benchmark's
threads, a whole vector of the widest width the host has per call (16 lanes with AVX-512,
8 with AVX2, 4 otherwise; the array's tail through a masked or scalar call).  The functions
are SLEEF's 1.0-ulp variants (``Sleef_expf16_u10`` ...; ``erfc``: its only one, 1.5 ulp,
``_u15``) and, where SLEEF has one, the 3.5-ulp variant (``_u35``).  :func:`load` returns None, with the reason, when gcc, the header
or the library is missing.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile

#: (name in the driver, SLEEF's base name, ulp variant)
FUNCTIONS = [("exp", "exp", "u10"), ("tanh", "tanh", "u10"), ("tanh_u35", "tanh", "u35"),
             ("erf", "erf", "u10"), ("log", "log", "u10"), ("log_u35", "log", "u35"),
             ("erfc", "erfc", "u15"), ("tan", "tan", "u10"), ("tan_u35", "tan", "u35"),
             ("sin", "sin", "u10"), ("sin_u35", "sin", "u35"), ("cos", "cos", "u10"),
             ("cos_u35", "cos", "u35")]

_C = r"""
#include <stddef.h>
#include <string.h>
#include <immintrin.h>
#include <sleef.h>
#if defined(__AVX512F__)
#  define W 16
#  define VT __m512
#  define LD _mm512_loadu_ps
#  define ST _mm512_storeu_ps
#  define F(name, u) Sleef_##name##f16_##u
#elif defined(__AVX2__)
#  define W 8
#  define VT __m256
#  define LD _mm256_loadu_ps
#  define ST _mm256_storeu_ps
#  define F(name, u) Sleef_##name##f8_##u
#else
#  define W 4
#  define VT __m128
#  define LD _mm_loadu_ps
#  define ST _mm_storeu_ps
#  define F(name, u) Sleef_##name##f4_##u
#endif
typedef VT (*vfn)(VT);

static vfn pick(int which) {
  switch (which) {
  %(cases)s
  }
  return 0;
}

int sleef_width(void) { return W; }

/* y[i] = f(x[i]) for i < n on `threads` threads; -1 for an unknown function */
int sleef_map(int which, const float *x, float *y, long n, int threads) {
  vfn f = pick(which);
  if (!f) return -1;
  long nv = n / W;
  #pragma omp parallel for num_threads(threads) schedule(static)
  for (long i = 0; i < nv; i++) ST(y + i * W, f(LD(x + i * W)));
  long done = nv * W;
  if (done < n) {          /* the tail: padded to one vector */
    float a[W], b[W];
    memset(a, 0, sizeof a);
    memcpy(a, x + done, (n - done) * sizeof(float));
    ST(b, f(LD(a)));
    memcpy(y + done, b, (n - done) * sizeof(float));
  }
  return 0;
}
"""


class Sleef:
    """The compiled driver: ``map(name, x, out)`` and the host's ``width``."""

    def __init__(self, lib: ctypes.CDLL, threads: int):
        self._lib = lib
        self._threads = threads
        self.width = lib.sleef_width()
        self._ids = {name: i for i, (name, _, _) in enumerate(FUNCTIONS)}
        lib.sleef_map.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_long, ctypes.c_int]

    def label(self, name: str) -> str:
        _, base, u = FUNCTIONS[self._ids[name]]
        return f"Sleef_{base}f{self.width}_{u}"

    def map(self, name: str, x, out) -> None:
        import numpy as np

        assert x.dtype == np.float32 and out.dtype == np.float32 and x.size == out.size
        assert x.flags.c_contiguous and out.flags.c_contiguous
        rc = self._lib.sleef_map(self._ids[name], x.ctypes.data, out.ctypes.data, x.size,
                                 self._threads)
        assert rc == 0, name


def _header() -> str | None:
    for d in ("/usr/include", "/usr/local/include", "/usr/include/x86_64-linux-gnu"):
        if os.path.exists(os.path.join(d, "sleef.h")):
            return d
    return None


def load(threads: int, tmp: str | None = None):
    """(Sleef, None) or (None, why not)."""
    if shutil.which("gcc") is None:
        return None, "no gcc"
    inc = _header()
    if inc is None:
        return None, "no sleef.h (Debian: apt-get install libsleef-dev)"
    cases = "\n  ".join(f"case {i}: return F({base}, {u});"
                        for i, (_, base, u) in enumerate(FUNCTIONS))
    tmp = tmp or tempfile.mkdtemp(prefix="tecomp-sleef-")
    src, lib = os.path.join(tmp, "sleef_driver.c"), os.path.join(tmp, "sleef_driver.so")
    with open(src, "w") as f:
        f.write(_C % {"cases": cases})
    r = subprocess.run(["gcc", "-O2", "-march=native", "-fopenmp", "-shared", "-fPIC",
                        "-I", inc, src, "-o", lib, "-lsleef"], capture_output=True, text=True)
    if r.returncode != 0:
        return None, "the SLEEF driver did not build: " + (r.stderr.strip().splitlines()
                                                           or ["?"])[-1]
    return Sleef(ctypes.CDLL(lib), threads), None
