"""tecomp's runtime: what running compiled kernels needs (no llvmlite).

:class:`Module` (:mod:`.module`), the protocol every compiled module follows; the LLVM
module (:mod:`.llvm`), the CUDA one (:mod:`.cuda`); the argument checks every runtime and
the interpreter share (:mod:`.argcheck`); ``tc.load_module`` (:mod:`.aot`; a GPU
library's module, :mod:`.cuda_library`, over the CUDA driver API, :mod:`.cuda_driver`);
``time_evaluator`` (:mod:`.timing`); extern stages' calls (:mod:`.extern`).  The package
imports nothing but the protocol itself, so that the code generators can use
:mod:`.timing` without importing the loader.
"""
import os

from .module import Module

__all__ = ["Module", "load_module"]


def get_include() -> str:
    """The directory of ``tecomp_rt.h``, the C header of an exported library's ABI.

    Returns
    -------
    str
        An absolute path to give the C compiler with ``-I`` (as ``numpy.get_include()``
        for numpy's headers): ``#include "tecomp_rt.h"`` then declares the kernel entries
        (``TECOMP_DECLARE_KERNEL(name)``), their error codes, the metadata function and
        the thread pool's controls (``docs/runtime.md``, "Calling an exported kernel
        from C").

    Examples
    --------
    >>> import os, tecomp.runtime
    >>> os.path.isfile(os.path.join(tecomp.runtime.get_include(), "tecomp_rt.h"))
    True
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "include")


def __getattr__(name):
    if name == "load_module":
        # (lazy: the loader, which the code generators that import this package never need)
        from .aot import load_module

        return load_module
    raise AttributeError(f"module 'tecomp.runtime' has no attribute {name!r}")
