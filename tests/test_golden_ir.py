"""Golden tests of the printed loop IR: one per primitive.  The printed IR is a product:
a change here must be deliberate.  On failure the assertion shows a unified diff."""
import difflib

import tecomp as tc
from helpers import matmul


def check(func, expected):
    got = str(func)
    if got != expected:
        diff = "\n".join(difflib.unified_diff(expected.splitlines(), got.splitlines(),
                                                "expected", "got", lineterm=""))
        raise AssertionError("printed IR changed:\n" + diff)



def test_split():
    """non-divisible split: the main part has no guard, the tail is peeled"""
    A, B, C, k = matmul(n=20, m=16, K=8)
    s = tc.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(C.op.axis[1])
    check(tc.lower(s, [A, B, C]), EXPECTED_SPLIT)


def test_fuse():
    """fuse + parallel"""
    A, B, C, k = matmul(n=8, m=12, K=8)
    s = tc.create_schedule(C.op)
    f = s[C].fuse(*C.op.axis)
    s[C].parallel(f)
    check(tc.lower(s, [A, B, C]), EXPECTED_FUSE)


def test_cache_write():
    """cache_write + compute_at: a 4x4 local accumulator per tile"""
    A, B, C, k = matmul(n=16, m=16, K=8)
    s = tc.create_schedule(C.op)
    CL = s.cache_write(C, "local")
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 4)
    s[CL].compute_at(s[C], jo)
    s[C].unroll(ii)
    check(tc.lower(s, [A, B, C]), EXPECTED_CACHE_WRITE)


def test_rfactor():
    """rfactor of a non-divisible split: the tail becomes a shorter reduction"""
    X = tc.placeholder((6, 50), name="X")
    kk = tc.reduce_axis((0, 50), name="k")
    Y = tc.compute((6,), lambda i: tc.sum(X[i, kk], axis=kk), name="Y")
    s = tc.create_schedule(Y.op)
    ko, ki = s[Y].split(kk, factor=8)
    s.rfactor(Y, ki)
    check(tc.lower(s, [X, Y]), EXPECTED_RFACTOR)


def test_bind():
    """GPU binding: thread loops keep their guard (no partitioning)"""
    n = tc.var("n")
    A = tc.placeholder((n,), name="A")
    B = tc.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = tc.create_schedule(B.op)
    bo, bi = s[B].split(B.op.axis[0], factor=64)
    s[B].bind(bo, tc.thread_axis("blockIdx.x"))
    s[B].bind(bi, tc.thread_axis("threadIdx.x"))
    check(tc.lower(s, [A, B]), EXPECTED_BIND)


def test_prefetch():
    """prefetch of the next row at the row loop, with the row's reduction computed there:
    one prefetch per 64-byte line (16 float32), the row clamped into the loop"""
    X = tc.placeholder((64, 100), name="X")
    k = tc.reduce_axis((0, 100), name="k")
    M = tc.compute((64,), lambda i: tc.max(X[i, k], axis=k), name="M")
    Y = tc.compute((64, 100), lambda i, j: X[i, j] - M[i], name="Y")
    s = tc.create_schedule(Y.op)
    s[M].compute_at(s[Y], Y.op.axis[0])
    s[Y].prefetch(X, Y.op.axis[0], 1)
    check(tc.lower(s, [X, Y]), EXPECTED_PREFETCH)


def test_double_buffer():
    """double_buffer: two buffers, the first tile copied before k.outer, the next one
    (asynchronously) after the loop's one barrier"""
    A, B, C, k = matmul(n=16, m=16, K=16)
    s = tc.create_schedule(C.op)
    AS = s.cache_read(A, "shared", [C])
    CL = s.cache_write(C, "local")
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].bind(io, tc.thread_axis("blockIdx.x"))
    s[C].bind(ii, tc.thread_axis("threadIdx.x"))
    s[CL].compute_at(s[C], ii)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=8)
    s[AS].compute_at(s[CL], ko)
    s[AS].bind(s[AS].op.axis[0], tc.thread_axis("threadIdx.x"))
    s[AS].double_buffer()
    check(tc.lower(s, [A, B, C], target="cuda"), EXPECTED_DOUBLE_BUFFER)


def test_tensor_cores():
    """wmma: fragment scopes, the accumulator's fill (the mma's init), the four tensorized
    stages (one warp, one 16 x 16 tile of C, two 16-wide k steps)"""
    from wmma_examples import hand_schedule

    s, args, _ = hand_schedule(M=16, N=16, K=32, bm=16, warps=1, kt=32)
    check(tc.lower(s, list(args), target="cuda"), EXPECTED_TENSOR_CORES)


EXPECTED_SPLIT = """\
primfn main(A: float32[20, 8], B: float32[8, 16], C: float32[20, 16]) {
  for (i.outer, 0, 2) {
    for (i.inner, 0, 8) {
      vectorized (j, 0, 16) {
        C[i.outer*8 + i.inner, j] = 0f
        for (k, 0, 8) {
          C[i.outer*8 + i.inner, j] = C[i.outer*8 + i.inner, j] + A[i.outer*8 + i.inner, k]*B[k, j]
        }
      }
    }
  }
  for (i.inner, 0, 4) {
    vectorized (j, 0, 16) {
      C[i.inner + 16, j] = 0f
      for (k, 0, 8) {
        C[i.inner + 16, j] = C[i.inner + 16, j] + A[i.inner + 16, k]*B[k, j]
      }
    }
  }
}"""


EXPECTED_FUSE = """\
primfn main(A: float32[8, 8], B: float32[8, 12], C: float32[8, 12]) {
  parallel (i.j.fused, 0, 96) {
    C[i.j.fused // 12, i.j.fused % 12] = 0f
    for (k, 0, 8) {
      C[i.j.fused // 12, i.j.fused % 12] = C[i.j.fused // 12, i.j.fused % 12] + A[i.j.fused // 12, k]*B[k, i.j.fused % 12]
    }
  }
}"""


EXPECTED_CACHE_WRITE = """\
primfn main(A: float32[16, 8], B: float32[8, 16], C: float32[16, 16]) {
  for (i.outer, 0, 4) {
    for (j.outer, 0, 4) {
      allocate C.local: float32[4, 4] (local)
      for (i, 0, 4) {
        for (j, 0, 4) {
          C.local[i, j] = 0f
          for (k, 0, 8) {
            C.local[i, j] = C.local[i, j] + A[i.outer*4 + i, k]*B[k, j.outer*4 + j]
          }
        }
      }
      unrolled (i.inner, 0, 4) {
        for (j.inner, 0, 4) {
          C[i.outer*4 + i.inner, j.outer*4 + j.inner] = C.local[i.inner, j.inner]
        }
      }
    }
  }
}"""


EXPECTED_RFACTOR = """\
primfn main(X: float32[6, 50], Y: float32[6]) {
  allocate Y.rf: float32[8, 6] (global)
  for (k.inner, 0, 2) {
    for (i, 0, 6) {
      Y.rf[k.inner, i] = 0f
      for (k.outer, 0, 7) {
        Y.rf[k.inner, i] = Y.rf[k.inner, i] + X[i, k.outer*8 + k.inner]
      }
    }
  }
  for (k.inner, 2, 6) {
    for (i, 0, 6) {
      Y.rf[k.inner, i] = 0f
      for (k.outer, 0, 6) {
        Y.rf[k.inner, i] = Y.rf[k.inner, i] + X[i, k.outer*8 + k.inner]
      }
    }
  }
  for (i_1, 0, 6) {
    Y[i_1] = 0f
    for (k.inner_1, 0, 8) {
      Y[i_1] = Y[i_1] + Y.rf[k.inner_1, i_1]
    }
  }
}"""


EXPECTED_BIND = """\
primfn main(A: float32[n], B: float32[n]) {
  // param_check n + 63 in [-2147483648, 2147483647]: '`n + 63` (an operand of `(n + 63) // 64`)'
  blockIdx.x (i.outer, 0, (n + 63) // 64) {
    threadIdx.x (i.inner, 0, 64) {
      if (i.outer*64 + i.inner < n) {
        B[i.outer*64 + i.inner] = A[i.outer*64 + i.inner] + 1f
      }
    }
  }
}"""


EXPECTED_PREFETCH = """\
primfn main(X: float32[64, 100], Y: float32[64, 100]) {
  for (i, 0, 64) {
    for (X.pf1, 0, 8) {
      prefetch X[min(i + 1, 63), min(X.pf1*16, 99)]
    }
    allocate M: float32[1] (global)
    M[0] = float32(-inf)
    for (k, 0, 100) {
      M[0] = max(M[0], X[i, k])
    }
    for (j, 0, 100) {
      Y[i, j] = X[i, j] - M[0]
    }
  }
}"""

EXPECTED_DOUBLE_BUFFER = """\
primfn main(A: float32[16, 16], B: float32[16, 16], C: float32[16, 16]) {
  blockIdx.x (i.outer, 0, 4) {
    threadIdx.x (i.inner, 0, 4) {
      allocate C.local: float32[1, 16] (local)
      for (j, 0, 16) {
        C.local[0, j] = 0f
        syncthreads()
        allocate A.shared: float32[2, 4, 8] (shared)
        {
          // attr async_copy = k.outer
          threadIdx.x (i0, 0, 4) {
            for (i1, 0, 8) {
              A.shared[0, i0, i1] = A[i.outer*4 + i0, i1]
            }
          }
        }
        for (k.outer, 0, 2) {
          syncthreads()
          if (k.outer + 1 < 2) {
            // attr async_copy = k.outer
            threadIdx.x (i0, 0, 4) {
              for (i1, 0, 8) {
                A.shared[(k.outer + 1) % 2, i0, i1] = A[i.outer*4 + i0, k.outer*8 + i1 + 8]
              }
            }
          }
          for (k.inner, 0, 8) {
            C.local[0, j] = C.local[0, j] + A.shared[k.outer % 2, i.inner, k.inner]*B[k.outer*8 + k.inner, j]
          }
        }
      }
      for (j_1, 0, 16) {
        C[i.outer*4 + i.inner, j_1] = C.local[0, j_1]
      }
    }
  }
}"""


EXPECTED_TENSOR_CORES = """\
primfn main(A: float16[16, 32], B: float16[32, 16], matmul: float32[16, 16]) {
  blockIdx.y (i.outer, 0, 1) {
    blockIdx.x (j.outer, 0, 1) {
      threadIdx.z (i.inner.outer, 0, 1) {
        threadIdx.y (j.inner.outer, 0, 1) {
          allocate matmul.wmma.accumulator: float32[16, 16] (wmma.accumulator)
          tensorize cuda.wmma_fill_f32 (store) {
            // out c: matmul.wmma.accumulator[x0, x1]
            for (i.inner, 0, 16) {
              for (j.inner, 0, 16) {
                matmul.wmma.accumulator[i.inner, j.inner] = 0f
              }
            }
          }
          {
            allocate B.shared: float16[32, 16] (shared)
            allocate A.shared: float16[16, 32] (shared)
            for (i0.i1.fused.outer.outer.outer.outer, 0, 2) {
              threadIdx.z (i0.i1.fused.outer.outer.outer.inner, 0, 1) {
                threadIdx.y (i0.i1.fused.outer.outer.inner, 0, 1) {
                  threadIdx.x (i0.i1.fused.outer.inner, 0, 32) {
                    vectorized (i0.i1.fused.inner, 0, 8) {
                      B.shared[i0.i1.fused.outer.outer.outer.outer*16 + i0.i1.fused.outer.inner // 2, (i0.i1.fused.outer.inner % 2)*8 + i0.i1.fused.inner] = B[i0.i1.fused.outer.outer.outer.outer*16 + i0.i1.fused.outer.inner // 2, (i0.i1.fused.outer.inner % 2)*8 + i0.i1.fused.inner]
                    }
                  }
                }
              }
            }
            for (i0.i1.fused.outer.outer.outer.outer_1, 0, 2) {
              threadIdx.z (i0.i1.fused.outer.outer.outer.inner_1, 0, 1) {
                threadIdx.y (i0.i1.fused.outer.outer.inner_1, 0, 1) {
                  threadIdx.x (i0.i1.fused.outer.inner_1, 0, 32) {
                    vectorized (i0.i1.fused.inner_1, 0, 8) {
                      A.shared[i0.i1.fused.outer.outer.outer.outer_1*8 + i0.i1.fused.outer.inner_1 // 4, (i0.i1.fused.outer.inner_1 % 4)*8 + i0.i1.fused.inner_1] = A[i0.i1.fused.outer.outer.outer.outer_1*8 + i0.i1.fused.outer.inner_1 // 4, (i0.i1.fused.outer.inner_1 % 4)*8 + i0.i1.fused.inner_1]
                    }
                  }
                }
              }
            }
            syncthreads()
            for (k.inner.outer, 0, 2) {
              allocate B.shared.wmma.matrix_b: float16[16, 16] (wmma.matrix_b)
              allocate A.shared.wmma.matrix_a: float16[16, 16] (wmma.matrix_a)
              tensorize cuda.wmma_load_b_f16 (store) {
                // out b_frag: B.shared.wmma.matrix_b[x0, x1]
                // in a: B.shared[k.inner.outer*16 + x0, x1]
                for (i0, 0, 16) {
                  for (i1.inner, 0, 16) {
                    B.shared.wmma.matrix_b[i0, i1.inner] = B.shared[k.inner.outer*16 + i0, i1.inner]
                  }
                }
              }
              tensorize cuda.wmma_load_a_f16 (store) {
                // out a_frag: A.shared.wmma.matrix_a[x0, x1]
                // in a: A.shared[x0, k.inner.outer*16 + x1]
                for (i0.inner, 0, 16) {
                  for (i1, 0, 16) {
                    A.shared.wmma.matrix_a[i0.inner, i1] = A.shared[i0.inner, k.inner.outer*16 + i1]
                  }
                }
              }
              tensorize cuda.wmma_mma_f16f16f32 (accumulate) {
                // out c: matmul.wmma.accumulator[x0, x1]
                // in a: A.shared.wmma.matrix_a[x0, x1]
                // in b: B.shared.wmma.matrix_b[x0, x1]
                for (i.inner, 0, 16) {
                  for (j.inner, 0, 16) {
                    for (k.inner.inner, 0, 16) {
                      matmul.wmma.accumulator[i.inner, j.inner] = matmul.wmma.accumulator[i.inner, j.inner] + float32(A.shared.wmma.matrix_a[i.inner, k.inner.inner])*float32(B.shared.wmma.matrix_b[k.inner.inner, j.inner])
                    }
                  }
                }
              }
            }
          }
          tensorize cuda.wmma_store_f32 (store) {
            // out c: matmul[x0, x1]
            // in a: matmul.wmma.accumulator[x0, x1]
            for (i.inner.inner.inner, 0, 16) {
              for (j.inner.inner.inner, 0, 16) {
                matmul[i.inner.inner.inner, j.inner.inner.inner] = matmul.wmma.accumulator[i.inner.inner.inner, j.inner.inner.inner]
              }
            }
          }
        }
      }
    }
  }
}"""
