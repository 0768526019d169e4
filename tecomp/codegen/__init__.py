"""Code generation and runtimes: LLVM for the CPU (the ``llvm`` package: the code
generator, its runtime, thread pool and JIT; ``signature``: the kernel ABI; ``threads``:
every thread pool's settings), exported libraries (``llvm.export``, ``aot_format``,
``libfiles``), CUDA C (``cuda``, ``c_source``), its CPU emulation (``cuda_emu``), and the
argument checks every runtime shares (``argcheck``).

Submodules are imported on use (llvmlite, a C++ compiler and pycuda are only needed by
the targets that use them), so this package imports nothing itself.
"""
