"""Constant weights packed once: the copies of an inference graph's convolution weights
in the layouts its kernels read (:func:`tecomp.dynamo.lowering_nn.weight_packs`), each
made at the first call and reused while its weight is unchanged.

A packed copy is kept per weight tensor and layout, with what it was made from: the
tensor's identity, its version counter (``t._version``, which every in-place change
made through the tensor bumps: an optimizer's step, ``load_state_dict``, ``with
torch.no_grad(): w.add_(1)``), its memory (``data_ptr``), shape, strides and dtype.  A
call whose weight differs in any of them packs it again (and replaces the copy), so
the kernels never read a stale one.  The copy is dropped when its weight dies (a weak
reference): the packed copies take as much memory as the weights they were made from,
no more.

What the version counter cannot see is a change made behind it: through ``w.data``
(``w.data.copy_(v)``; a tensor of its own, with a counter of its own) or by another
tensor over the same memory made without autograd's knowledge (``torch.from_numpy`` of
an array that is changed in place): the kernels then read the stale copy.  So the backend
packs only with ``options={"prepack": True}`` (off by default), for code that updates
weights in place through the parameters themselves (under ``torch.no_grad()``).
A weight with no version counter (an inference tensor, made under
``torch.inference_mode``) is packed again at every call.
"""
from __future__ import annotations

import threading
import weakref
from typing import Dict

import torch

from .. import te as _te
from ..errors import InternalError
from ..strategy.cpu.conv2d_tasks import PREPACKED_WEIGHT

#: (reentrant: a weight's weak-reference callback may run from a garbage collection that
#: an allocation under the lock set off, on the same thread)
_LOCK = threading.RLock()
#: (id(weight), pack name) -> (weak reference to the weight, its state, the packed copy)
_KEPT: Dict[tuple, tuple] = {}

#: how many packed copies were made and reused in this process (for tests and logs)
STATS = {"packed": 0, "reused": 0}


def _state(t: torch.Tensor):
    """What a packed copy of ``t`` was made from, beyond its identity; None where ``t``
    keeps no version counter (an inference tensor)."""
    if t.is_inference():
        return None
    return (t._version, t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)


def packed(t: torch.Tensor, pack) -> torch.Tensor:
    """``t`` in ``pack``'s layout (a :class:`tecomp.dynamo.lowering_nn.Pack`): the kept
    copy where ``t`` is unchanged since it was made, else a new one (kept)."""
    if not pack.cached:
        return pack.pack(t)
    state = _state(t)
    key = (id(t), pack.name)
    if state is not None:
        kept = _KEPT.get(key)
        if kept is not None and kept[0]() is t and kept[1] == state:
            STATS["reused"] += 1
            return kept[2]
    p = pack.pack(t)
    STATS["packed"] += 1
    if state is not None and _state(t) == state:
        def forget(ref, key=key):
            with _LOCK:
                if _KEPT.get(key, (None,))[0] is ref:
                    del _KEPT[key]
        with _LOCK:
            _KEPT[key] = (weakref.ref(t, forget), state, p)
    return p


def clear() -> None:
    """Drop every packed copy (they are made again at the next calls)."""
    with _LOCK:
        _KEPT.clear()


def kept() -> int:
    """How many packed copies this process keeps."""
    return len(_KEPT)


# -- the layouts -----------------------------------------------------------------------
class Pack:
    """A layout a convolution's weight is packed into ahead of the calls (see
    :func:`weight_packs`): ``shape(w)`` its shape, ``pack(w)`` the packed tensor, ``view``
    the rule's tensor in the weight's own layout over the packed placeholder; ``cached``:
    whether the packed tensor is a copy, kept while the weight is unchanged (else a view,
    made at each call)."""

    def __init__(self, name, shape, pack, view, cached):
        self.name, self.shape, self.pack, self.view, self.cached = \
            name, shape, pack, view, cached

    def __repr__(self):
        return f"Pack({self.name!r})"


def _blocked(ob):
    """OIHW weights as ``[O / ob, C, KH, KW, ob]``: each block of ``ob`` output channels
    contiguous, the layout the NCHW template copies them into when its vectors run
    across the output channels (``by_channels``)."""
    def shape(ws):
        O, C, KH, KW = ws
        return (O // ob, C, KH, KW, ob)

    def pack(t):
        O, C, KH, KW = t.shape
        return t.detach().reshape(O // ob, ob, C, KH, KW).permute(0, 2, 3, 4, 1) \
            .contiguous()

    def view(p, ws, name):
        return _te.compute(ws, lambda o, c, y, x: p[o // ob, c, y, x, o % ob], name=name,
                           tag=PREPACKED_WEIGHT)
    return Pack(f"oihw_blocked{ob}", shape, pack, view, cached=True)


def _gemm_1x1_pack():
    def shape(ws):
        return (1, ws[0], ws[1])

    def pack(t):  # (a view of a contiguous weight: no copy)
        return t.detach().reshape(1, t.shape[0], t.shape[1]).contiguous()

    def view(p, ws, name):
        return _te.compute(ws, lambda k, c, y, x: p[0, k, c], name=name)
    return Pack("gemm_1x1", shape, pack, view, cached=False)


#: the packs by name (a region's ``packs`` name them; they are part of its kernel's key)
PACKS: Dict[str, Pack] = {}


def _pack(name) -> Pack:
    p = PACKS.get(name)
    if p is None:
        if name == "gemm_1x1":
            p = _gemm_1x1_pack()
        elif name.startswith("oihw_blocked"):
            p = _blocked(int(name[len("oihw_blocked"):]))
        else:
            raise InternalError(f"tecomp.dynamo: unknown weight pack {name!r:.40}")
        PACKS[name] = p
    return p
