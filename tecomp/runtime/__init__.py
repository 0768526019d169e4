"""tecomp's runtime: what running compiled kernels needs (no llvmlite).

``tc.load_module`` (:mod:`.aot`) and ``time_evaluator`` (:mod:`.timing`).  The package
imports nothing itself, so that the code generators can use :mod:`.timing` without
importing the loader.
"""


def __getattr__(name):
    if name == "load_module":
        from .aot import load_module

        return load_module
    raise AttributeError(f"module 'tecomp.runtime' has no attribute {name!r}")
