"""``tc.nd`` (this module): TVM's ``tvm.nd.array`` / ``tvm.nd.empty`` for code written for TVM.

tecomp's compiled functions take numpy arrays as they are, so ``tc.nd.array(x)`` is a
numpy array: an :class:`NDArray`, a ``numpy.ndarray`` subclass with TVM's methods
(``asnumpy()``, ``numpy()``, ``copyfrom()``, ``copyto()``, ``device``).  Everything numpy
does with an array works on it, and a kernel writes into it in place::

    import numpy as np
    import tecomp as tc

    dev = tc.cpu(0)
    a = tc.nd.array(np.arange(4, dtype="float32"), dev)
    b = tc.nd.empty((4,), "float32", dev)
    # f(a, b) ... b.numpy()

They are host arrays: for the GPU, pass numpy arrays (a CUDA module copies them to the
GPU and back for each call) or arrays that live on the GPU (torch CUDA tensors, CuPy,
pycuda GPUArrays); ``tc.nd.array(x, tc.cuda(0))`` says so.
"""
from __future__ import annotations

import numpy as np

from ..errors import ArgumentError
from .arrays import aligned as _aligned, empty as _aligned_empty
from .device import CPU, Device, cpu, device as _device

__all__ = ["NDArray", "array", "empty"]


class NDArray(np.ndarray):
    """A numpy array with TVM's NDArray methods; what :func:`array` and :func:`empty`
    return."""

    @property
    def device(self) -> Device:
        """``tc.cpu(0)``: where the array lives."""
        return cpu(0)

    def asnumpy(self) -> np.ndarray:
        """A copy, as a plain ``numpy.ndarray`` (TVM's ``asnumpy``)."""
        return np.array(self.view(np.ndarray), copy=True)

    def numpy(self) -> np.ndarray:
        """A copy, as a plain ``numpy.ndarray`` (TVM's ``numpy``)."""
        return self.asnumpy()

    def copyfrom(self, source) -> "NDArray":
        """Copy ``source`` (an array of this shape) into this array; returns it."""
        src = np.asarray(source)
        if src.shape != self.shape:
            raise ArgumentError(f"copyfrom: the source has shape {src.shape}, this array "
                                f"{self.shape}: copy an array of the same shape")
        self[...] = src
        return self

    def copyto(self, target):
        """Copy into ``target`` (an array of this shape, returned), or, given a device,
        into a new array there."""
        if isinstance(target, Device):
            return array(self, target)
        if not isinstance(target, np.ndarray):
            raise ArgumentError(f"copyto: target must be an array or a device (tc.cpu(0)), "
                                f"got {type(target).__name__}")
        if target.shape != self.shape:
            raise ArgumentError(f"copyto: the target has shape {target.shape}, this array "
                                f"{self.shape}: give an array of the same shape")
        target[...] = self
        return target


def _host(dev, what: str) -> None:
    d = _device(dev)
    if d.device_type != CPU:
        raise ArgumentError(
            f"tc.nd.{what}(..., {d}): tecomp has no GPU array type of its own; pass numpy "
            f"arrays (a CUDA module copies them to the GPU and back on each call), or arrays "
            f"already on the GPU (torch.tensor(x, device='cuda'), CuPy, pycuda GPUArray: "
            f"anything with __cuda_array_interface__), or use tc.nd.{what}(..., tc.cpu(0))")


def array(arr, device=None) -> NDArray:
    """A copy of ``arr`` as an :class:`NDArray` (TVM's ``tvm.nd.array``): 64-byte
    aligned, C-contiguous.

    Parameters
    ----------
    arr : array_like
        Anything ``numpy.array`` takes (a numpy array, a list, a torch CPU tensor).
    device : Device, optional
        ``tc.cpu(0)`` (the default).

    Returns
    -------
    NDArray

    Raises
    ------
    ArgumentError
        A GPU device (the message says what to pass instead), or ``arr`` not numbers.

    Examples
    --------
    >>> import numpy as np, tecomp as tc
    >>> tc.nd.array(np.arange(3, dtype="float32"), tc.cpu(0)).asnumpy()
    array([0., 1., 2.], dtype=float32)
    """
    _host(cpu(0) if device is None else device, "array")
    src = np.array(arr, copy=True, order="C")
    if src.dtype == object:
        raise ArgumentError(f"tc.nd.array: {type(arr).__name__} is not an array of numbers")
    return _aligned(src).view(NDArray)


def empty(shape, dtype="float32", device=None) -> NDArray:
    """An uninitialised :class:`NDArray` (TVM's ``tvm.nd.empty``), 64-byte aligned.

    Parameters
    ----------
    shape : int or tuple of int
        Its extents (each >= 0; a negative one is a ShapeError).
    dtype : str
        A numpy dtype name (``"float32"``, ``"int8"``, ...).
    device : Device, optional
        Only ``tc.cpu(0)``, the default: a GPU is an ArgumentError, as for :func:`array`.

    Returns
    -------
    NDArray
        Its elements are whatever the memory held.
    """
    _host(cpu(0) if device is None else device, "empty")
    return _aligned_empty(shape, dtype).view(NDArray)
