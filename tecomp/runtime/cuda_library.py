"""A GPU library ``tc.load_module`` loaded: :class:`CudaLibraryModule`.

It is the CUDA runtime's module (:class:`~tecomp.runtime.cuda.CudaModule`: the same
argument checks and messages, launch sizes computed from the shapes with the host
evaluator, checked against the device) over the library's metadata instead of generated
source, and over the CUDA driver API (:mod:`tecomp.runtime.cuda_driver`) instead of
nvcc and pycuda.  Before the first launch it checks that the fatbin holds code the GPU
runs (a cubin of its architecture family, or PTX it can compile), else
:class:`~tecomp.errors.DeviceCodeError`.

Calls take device arrays only (``__cuda_array_interface__``: PyTorch CUDA tensors, CuPy
arrays, numba): a numpy array or CPU tensor is an ArgumentError (the library does not
copy host memory).  The kernels run on the GPU the arrays live on (as a PyTorch operator
does: the library's code is loaded once per device it runs on); arrays on two GPUs in
one call are an ArgumentError, and so is an array on another GPU than ``module.device``
where that is set (an int: the kernels run there only).
"""
from __future__ import annotations

from typing import Dict, Optional

from . import cuda_driver
from .aot_format import LibraryInfo
from .cuda import CudaModule, arrays_device
from .cuda_kernels import CudaSource
from .fatbin import describe_code, pick_code, read_fatbin
from ..errors import ArgumentError, BuildError, DeviceCodeError, LoadError
from ..ir.dtype import compute_dtype, numpy_dtype
from ..ir.stmt import PrimFunc, SeqStmt

__all__ = ["CudaLibraryModule"]


def param_bytes(p) -> int:
    """The bytes of kernel parameter ``p`` (a :class:`~tecomp.runtime.cuda_kernels.
    KernelParam`) in the code tecomp generates: a pointer's 8, a CUtensorMap's 128, a
    scalar's of its compute dtype (a float16 scalar is a float: ``param_ctype``)."""
    if p.is_buffer:
        return 8
    if p.dtype == "tensor_map":
        return 128
    return numpy_dtype(compute_dtype(p.dtype)).itemsize


class CudaLibraryModule(CudaModule):
    """The kernels of a GPU library, launched through the CUDA driver (see the module
    docstring).  Made by ``tc.load_module``."""

    _arrays = True   # device arrays only

    def __init__(self, info: LibraryInfo, fatbin: bytes, where: str,
                 device: Optional[int] = None):
        c = info.cuda
        entries = read_fatbin(fatbin, where, LoadError)
        have = {e.name for e in entries}
        missing = [a for a in c.archs + (c.ptx,) if a not in have]
        if len(fatbin) != c.fatbin_bytes or missing:
            raise LoadError(f"{where}: its fatbin ({len(fatbin)} bytes: "
                            f"{describe_code(entries)}) is not the one its metadata describes "
                            f"({c.fatbin_bytes} bytes: {', '.join(c.archs)} and PTX {c.ptx}); "
                            f"export it again")
        func = PrimFunc(info.name, info.params, SeqStmt(()),
                        {"param_checks": info.param_checks, "in_place": info.in_place})
        cs = CudaSource(func, "", list(c.kernels), list(c.workspaces), list(c.host_asserts),
                        frozenset(info.written))
        super().__init__(cs)
        self.fatbin = fatbin
        self.code = entries
        self.where = where
        #: the ordinal of the GPU the kernels run on (arrays must live there); None: the
        #: GPU of each call's arrays
        self.device = device
        #: the target string the library was exported for
        self.target_name = info.target
        self._per_device: Dict[int, tuple] = {}   # ordinal -> (driver, functions, launches ok)

    def driver(self, ordinal: Optional[int] = None):
        """The driver of device ``ordinal`` (default: ``module.device``, else 0)."""
        if ordinal is None:
            ordinal = self.device if self.device is not None else 0
        return cuda_driver.driver(ordinal)

    def _driver_for(self, metas):
        drv = self.driver()   # any device's driver tells where a pointer lives
        found = arrays_device(self.func, metas, drv.pointer_device, self.device,
                              "module.device")
        ordinal = self.device if self.device is not None else (found if found is not None else 0)
        return drv if drv.ordinal == ordinal else self.driver(ordinal)

    def _plan_driver(self, entry, ptrs):
        """:meth:`_driver_for` for a planned call (``ptrs``: the arrays' addresses): None
        where an array is in memory the driver does not know or on another device than
        the call's, for the full path to say so."""
        drv = self.driver()
        want = self.device
        for i in entry.nonempty:
            dev = drv.pointer_device(ptrs[i])
            if dev is None:
                return None
            if want is None:
                want = dev
            elif dev != want:
                return None
        ordinal = want if want is not None else 0
        return drv if drv.ordinal == ordinal else self.driver(ordinal)

    def _kernel_functions(self, drv):
        entry = self._per_device.get(drv.ordinal)
        if entry is not None and entry[0] is drv:
            self._functions, self._launch_ok = (drv, entry[1]), entry[2]
            return entry[1]
        cc = tuple(drv.compute_capability)
        if pick_code(self.code, cc) is None:
            raise DeviceCodeError(
                f"{self.where} holds GPU code for {describe_code(self.code)}, none of "
                f"which runs on device {drv.ordinal} ({drv.name}, compute capability "
                f"{cc[0]}.{cc[1]}, sm_{cc[0]}{cc[1]}): export it with "
                f"tc.build(..., target='cuda -arch=sm_{cc[0]}{cc[1]}') for this GPU")
        module, status = drv.load_module(self.fatbin)
        if status == cuda_driver.CUDA_ERROR_NO_BINARY_FOR_GPU:
            raise DeviceCodeError(
                f"{self.where}: the CUDA driver found no code for device {drv.ordinal} "
                f"({drv.name}, sm_{cc[0]}{cc[1]}) in its fatbin "
                f"({describe_code(self.code)}); its PTX needs a newer driver, or export "
                f"it for this GPU (target='cuda -arch=sm_{cc[0]}{cc[1]}')")
        drv.check(status, f"cuModuleLoadData of {self.where}")
        fns = [drv.get_function(module, k.name) for k in self.kernels]
        for k, fn in zip(self.kernels, fns):
            self._check_params(k, drv.param_sizes(fn))
        self._functions, self._launch_ok = (drv, fns), set()
        self._per_device[drv.ordinal] = (drv, fns, self._launch_ok)
        return self._functions[1]

    def _check_params(self, kernel, sizes) -> None:
        """LoadError unless kernel ``kernel``'s code takes the parameters its metadata
        says (``sizes``: their bytes, as the driver reads the code; None: unknown): a
        launch with fewer arguments than the code reads would hand it stray values as
        pointers, and a 4-byte value where the code reads 8 bytes (an int32 scalar the
        metadata says where the code takes an int64) half a stray value."""
        if sizes is None:
            return
        ok = list(sizes) == [param_bytes(p) for p in kernel.params]
        if not ok:
            said = ", ".join(f"{p.name} ({'pointer' if p.is_buffer else p.dtype})"
                             for p in kernel.params)[:300]
            raise LoadError(
                f"{self.where}: kernel {kernel.name}'s GPU code takes {len(sizes)} "
                f"parameter{'s' if len(sizes) != 1 else ''} of {sizes[:16]} bytes, and its "
                f"metadata describes {len(kernel.params)}: {said}; the metadata is not the "
                f"one exported with this code: export the library again with "
                f"Module.export_library")

    def get_source(self, fmt: str = "cuda") -> str:
        raise LoadError(f"the module loaded from {self.where} has no source (the library "
                        f"holds the GPU code as a fatbin: {describe_code(self.code)}); get "
                        f"the source from the module that was exported")

    def export_library(self, path) -> None:
        raise BuildError(f"the module loaded from {self.where} is a library already: copy "
                         f"the file and its .sha256 sidecar instead of exporting it again")

    def __repr__(self):
        return (f"<CudaLibraryModule {self.func.name}: {len(self.kernels)} kernel(s), "
                f"{describe_code(self.code)}>")
