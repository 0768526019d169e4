"""Code generation and runtimes: LLVM for the CPU (``llvm``, ``llvm_runtime``,
``llvm_threadpool``, ``llvm_jit``; ``signature``: the kernel ABI; ``threads``: every
thread pool's settings), exported libraries (``llvm_export``, ``aot_format``,
``libfiles``), CUDA C (``cuda``, ``c_source``), its CPU emulation (``cuda_emu``), and the
argument checks every runtime shares (``argcheck``).

Submodules are imported on use (llvmlite, a C++ compiler and pycuda are only needed by
the targets that use them), so this package imports nothing itself.
"""
