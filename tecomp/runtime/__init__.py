"""tecomp's runtime: what running compiled kernels needs (no llvmlite).

:class:`Module` (:mod:`.module`), the protocol every compiled module follows; the LLVM
module (:mod:`.llvm`), the CUDA one (:mod:`.cuda`); the argument checks every runtime and
the interpreter share (:mod:`.argcheck`); ``tc.load_module`` (:mod:`.aot`);
``time_evaluator`` (:mod:`.timing`); extern stages' calls (:mod:`.extern`).  The package
imports nothing but the protocol itself, so that the code generators can use
:mod:`.timing` without importing the loader.
"""
from .module import Module

__all__ = ["Module", "load_module"]


def __getattr__(name):
    if name == "load_module":
        # (lazy: the loader, which the code generators that import this package never need)
        from .aot import load_module

        return load_module
    raise AttributeError(f"module 'tecomp.runtime' has no attribute {name!r}")
