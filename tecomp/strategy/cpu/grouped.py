"""Grouped convolutions (``schedule_group_conv2d_nchw`` / ``schedule_group_conv2d_nhwc``:
``tecomp.nn.conv2d_*`` with ``groups`` between 1 and the channels, tag
``group_conv2d_*``).

Output channel ``o`` sums the ``I`` input channels of its group ``o // P`` (``P`` output
channels per group).  A register block of outputs therefore shares its input vectors
only while it stays inside one group:

* NCHW: a block is ``OB`` output channels of one group (``OB`` divides ``P``) x ``YB``
  rows x one vector of columns; the block's channels read the same input rows, so each
  input vector loaded feeds ``OB`` FMAs (the weights are broadcasts).  Tasks are the
  (image, channel block) pairs.
* NHWC: a block is ``XB`` pixels x ``OB`` output channels, vectors along the channels;
  when a vector of channels lies in one group (``P`` a multiple of the vector), each
  lane reads the same input value (one broadcast per pixel and input channel).  With
  smaller groups, the vector's lanes read ``L / P`` different input channels.  Tasks
  are blocks of output rows.

The padding is read in place and the blocks inside the image are partitioned off the
border ones (as the depthwise template, :mod:`.depthwise`)."""
from __future__ import annotations

from ...schedule.schedule import Schedule
from .._common import _cint, _largest_divisor_at_most
from .common import _template_or_rules
from .conv2d import _conv_parts
from .depthwise import _lanes, _nchw_rows_into, _nhwc_pixels_into
from ...target import CpuModel


def _per_group(conv) -> int:
    """Output channels per group of a ``group_conv2d_*`` stage."""
    groups = conv.op.attrs["group_conv2d"][3]
    O = _cint(conv.shape[1] if "group_conv2d_nchw" in conv.op.tag.split(",")
              else conv.shape[3])
    return O // groups


def _grouped_nchw_into(s: Schedule, outs, info: CpuModel) -> None:
    conv, _ = _conv_parts(outs, "group_conv2d_nchw")
    # up to 8 channels of one group share the input vectors
    _nchw_rows_into(s, outs, info, "group_conv2d_nchw",
                    _largest_divisor_at_most(_per_group(conv), 8))


def _grouped_nhwc_into(s: Schedule, outs, info: CpuModel) -> None:
    conv, _ = _conv_parts(outs, "group_conv2d_nhwc")
    L = _lanes(conv, info)
    P = _per_group(conv)
    # a vector of channels inside one group: its lanes read one input value (a
    # broadcast); groups narrower than a vector get vectors of their width (a vector
    # across groups reads a different input channel per lane group: a gather, 8x
    # slower single-threaded at 128 channels in groups of 4, 56x56), wider ones two
    # vectors where they divide them
    ob = 2 * L if P % (2 * L) == 0 else L if P % L == 0 else P if P < L else \
        _largest_divisor_at_most(P, L)
    _nhwc_pixels_into(s, outs, info, "group_conv2d_nhwc", ob)


def schedule_group_conv2d_nchw(outs, target: str = "llvm") -> Schedule:
    """The CPU schedule of ``tecomp.nn.conv2d_nchw`` with ``groups`` (a stage tagged
    ``group_conv2d_nchw``), plus any elementwise epilogue (see the module); other DAGs
    get the auto-scheduler's rules.

    Parameters
    ----------
    outs : Tensor or list of Tensor
        The operator's output (or the epilogue's).
    target : str or Target, optional
        An LLVM CPU target; its machine model sizes the blocks.

    Returns
    -------
    Schedule
        The schedule.
    """
    return _template_or_rules(_grouped_nchw_into, outs, target)


def schedule_group_conv2d_nhwc(outs, target: str = "llvm") -> Schedule:
    """The CPU schedule of ``tecomp.nn.conv2d_nhwc`` with ``groups`` (a stage tagged
    ``group_conv2d_nhwc``), plus any elementwise epilogue (see the module); other DAGs
    get the auto-scheduler's rules.

    Parameters
    ----------
    outs : Tensor or list of Tensor
        The operator's output (or the epilogue's).
    target : str or Target, optional
        An LLVM CPU target; its machine model sizes the blocks.

    Returns
    -------
    Schedule
        The schedule.
    """
    return _template_or_rules(_grouped_nhwc_into, outs, target)

