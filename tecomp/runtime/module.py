"""The protocol every compiled module follows: what ``tc.build`` returns for any target
(:class:`tecomp.runtime.llvm.Module` for ``llvm``, :class:`tecomp.runtime.cuda.CudaModule`
for ``cuda``, :class:`tecomp.codegen.cuda_emu.CudaEmuModule` for ``cuda-emu``) and what
``tc.load_module`` gives back for an exported library.

* ``f(*args)``: run the kernel on numpy arrays (or arrays that speak DLPack / the array
  interface) and scalars, in the order of the ``args`` it was built with; arguments are
  checked by :mod:`tecomp.runtime.argcheck`, with the same messages everywhere;
* ``f.get_source(kind)``: the generated code (``"llvm"``, ``"asm"``, ``"cuda"``, ...);
* ``f.time_evaluator(number=, repeat=, ...)(*args)``: a timer, as TVM's
  (:mod:`tecomp.runtime.timing`).
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Module(Protocol):
    """A compiled kernel: what ``tc.build`` returns for any target and what
    ``tc.load_module`` gives back (see the module docstring).

    A protocol: ``isinstance(f, tecomp.runtime.Module)`` holds for every compiled
    module.  ``f(*args)`` runs it, ``f.get_source(kind)`` gives the generated code,
    ``f.time_evaluator(...)`` a timer.

    Parameters
    ----------
    *args
        Not constructed by users.
    **kwargs
        Not constructed by users.
    """

    def __call__(self, *args, **kwargs): ...

    def get_source(self, *args, **kwargs) -> str: ...

    def time_evaluator(self, *args, number: int = 10, repeat: int = 3,
                       min_repeat_ms: float = 0, warmup: int = 1): ...
