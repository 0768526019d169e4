"""The code generators: LLVM for the CPU (the ``llvm`` package: the code generator, the
thread pool, the JIT, ``llvm.export`` for libraries), CUDA C (``cuda``, ``c_source``,
``nvcc``) and its CPU emulation (``cuda_emu``).  What running their code needs (the
module classes, the kernel ABI's ``signature``, the library format ``aot_format`` and
the sidecars of ``libfiles``, the argument checks) is :mod:`tecomp.runtime`'s.

Submodules are imported on use (llvmlite, a C++ compiler and pycuda are only needed by
the targets that use them), so this package imports nothing itself.
"""
