"""Devices as TVM spells them: ``tc.cpu(0)``, ``tc.cuda(0)``, ``tc.device("cuda", 0)``.

tecomp does not need them: a CPU module runs on this machine's CPU and a CUDA module on
GPU 0, and both take numpy arrays (or torch tensors, DLPack and CUDA array interface
objects) directly.  They are here so that code written for TVM keeps working where a
device means the same thing: ``tc.nd.array(x, tc.cpu(0))``, ``tc.nd.empty(shape,
dtype, dev)`` and ``f.time_evaluator(f.entry_name, dev)``.  A device has TVM's
``device_type`` (DLPack's code: 1 for the CPU, 2 for CUDA) and ``device_id``,
``__dlpack_device__()``, ``exist`` and ``sync()``.
"""
from __future__ import annotations

import numbers

from ..errors import ArgumentError

__all__ = ["Device", "device", "cpu", "cuda", "CPU", "CUDA"]

#: DLPack's device type codes (TVM's ``Device.device_type``)
CPU, CUDA = 1, 2
_KINDS = {"cpu": CPU, "llvm": CPU, "cuda": CUDA, "gpu": CUDA}
_NAMES = {CPU: "cpu", CUDA: "cuda"}


class Device:
    """A device, as TVM's ``tvm.runtime.Device``: made by :func:`cpu`, :func:`cuda` or
    :func:`device`; immutable and hashable.

    Parameters
    ----------
    device_type : int
        DLPack's code: 1 the CPU, 2 a CUDA GPU.
    device_id : int
        Which one (the CPU has only 0).

    Raises
    ------
    ArgumentError
        Another type code, or a bad id.
    """

    __slots__ = ("device_type", "device_id")

    def __init__(self, device_type: int, device_id: int = 0):
        if device_type not in _NAMES:
            raise ArgumentError(f"device_type {device_type!r:.40} is not a device tecomp runs "
                                f"on: use tc.cpu(0) or tc.cuda(0)")
        if isinstance(device_id, bool) or not isinstance(device_id, numbers.Integral) \
                or device_id < 0:
            raise ArgumentError(f"device_id must be an int >= 0, got {device_id!r:.40}")
        if device_type == CPU and device_id != 0:
            raise ArgumentError(f"tc.cpu({device_id}): tecomp has one CPU device, "
                                f"tc.cpu(0) (its threads: tc.set_num_threads)")
        object.__setattr__(self, "device_type", int(device_type))
        object.__setattr__(self, "device_id", int(device_id))

    def __setattr__(self, name, value):
        raise AttributeError("a Device cannot be changed; make another with tc.device()")

    @property
    def kind(self) -> str:
        """``"cpu"`` or ``"cuda"``."""
        return _NAMES[self.device_type]

    @property
    def exist(self) -> bool:
        """Whether the device is there: the CPU always; a GPU when pycuda sees it."""
        if self.device_type == CPU:
            return True
        try:
            import pycuda.driver as drv

            drv.init()
            return drv.Device.count() > self.device_id
        except Exception:  # noqa: BLE001 - no pycuda, no driver: no GPU
            return False

    def sync(self) -> None:
        """Wait for the device's work.  A tecomp call waits for its kernels already
        (unless given ``stream=``): this waits for the GPU's context too."""
        if self.device_type != CUDA:
            return
        try:
            import pycuda.driver as drv
            ctx = drv.Context.get_current()
        except Exception:  # noqa: BLE001 - no pycuda or no driver: nothing ran there
            return
        if ctx is not None:   # (the context tecomp's CUDA modules run in, once they ran)
            drv.Context.synchronize()

    def __dlpack_device__(self):
        return (self.device_type, self.device_id)

    def __eq__(self, other):
        return isinstance(other, Device) and (self.device_type, self.device_id) == (
            other.device_type, other.device_id)

    def __hash__(self):
        return hash((Device, self.device_type, self.device_id))

    def __repr__(self):
        return f"{self.kind}({self.device_id})"

    __str__ = __repr__


def device(dev_type: "str | int", dev_id: int = 0) -> Device:
    """A device by name, as TVM's ``tvm.device``.

    Parameters
    ----------
    dev_type : str, int or Device
        ``"cpu"`` (or ``"llvm"``), ``"cuda"`` (or ``"gpu"``), torch's ``"cuda:1"``, or
        DLPack's type code (1: the CPU, 2: CUDA).
    dev_id : int
        Which one (the CPU has only 0).

    Returns
    -------
    Device

    Raises
    ------
    ArgumentError
        A device tecomp does not run on (``"rocm"``), or a bad id.

    Examples
    --------
    >>> import tecomp as tc
    >>> tc.device("cuda", 0) == tc.cuda(0)
    True
    """
    if isinstance(dev_type, str):
        kind = dev_type.split(":")[0].strip().lower()
        if kind not in _KINDS:
            raise ArgumentError(
                f"device {dev_type!r:.40}: tecomp runs on 'cpu' and 'cuda' (tc.cpu(0), "
                f"tc.cuda(0))")
        if ":" in dev_type:   # torch's spelling, "cuda:1"
            tail = dev_type.split(":", 1)[1].strip()
            if not tail.isdigit():
                raise ArgumentError(f"device {dev_type!r:.40}: the id after ':' must be an "
                                    f"integer")
            dev_id = int(tail)
        return Device(_KINDS[kind], dev_id)
    if isinstance(dev_type, Device):
        return dev_type
    return Device(dev_type, dev_id)


def cpu(dev_id: int = 0) -> Device:
    """This machine's CPU (TVM's ``tvm.cpu(0)``).

    Parameters
    ----------
    dev_id : int
        0: tecomp has one CPU device (its threads: ``tc.set_num_threads``).

    Returns
    -------
    Device
        ``device_type`` 1, ``device_id`` 0.

    Raises
    ------
    ArgumentError
        ``dev_id`` other than 0.
    """
    return Device(CPU, dev_id)


def cuda(dev_id: int = 0) -> Device:
    """A CUDA GPU (TVM's ``tvm.cuda(0)``); tecomp's CUDA modules run on GPU 0.

    Parameters
    ----------
    dev_id : int
        The GPU's ordinal.

    Returns
    -------
    Device
        ``device_type`` 2.

    Raises
    ------
    ArgumentError
        A negative or non-integer ``dev_id``.
    """
    return Device(CUDA, dev_id)
