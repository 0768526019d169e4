"""The tasks of the CPU convolution templates: how the threads share a convolution's
images, row blocks and channel blocks (``ConvParams.tasks``), where the padded input and
the weight copies are computed, and the weight copies themselves (transposed in
registers where they can be)."""
from __future__ import annotations

from typing import Optional

from ...errors import ScheduleError
from ...schedule.schedule import Schedule, Stage
from ...te.tensor import ComputeOp, Tensor
from ...te.tensor_intrin import transpose_intrin
from .._common import _bytes, _ceil, _cint
from .common import _vector_split
from .elementwise import _schedule_elementwise_stage
from ...target import CpuModel


def _small_weights(weight: Tensor, info: CpuModel) -> bool:
    """Whether a convolution's weights fit in a quarter of L2 (see :func:`_conv_tasks`)."""
    wbytes = _bytes(weight)
    return wbytes is not None and wbytes <= info.l2_bytes // 4


#: the tag of a stage that is a convolution's OIHW weight read from a copy its caller
#: packed once, ahead of the calls (the ``torch.compile`` backend's constant weights):
#: ``W[o, c, ky, kx] = P[o // OB, c, ky, kx, o % OB]``, each block of ``OB`` output
#: channels contiguous, as the template's own copy lays them out
PREPACKED_WEIGHT = "prepacked_weight"


def prepacked(weight: Tensor) -> bool:
    """Whether ``weight`` is a :data:`PREPACKED_WEIGHT` stage (the template inlines it
    and reads the packed weights in place instead of copying them)."""
    return isinstance(weight.op, ComputeOp) and PREPACKED_WEIGHT in (weight.op.tag or "")


def _rows_peeled(N, K, ob, OH, yb, info: CpuModel) -> bool:
    """Whether an NCHW convolution with ``OB x YB`` blocks runs its row blocks as a serial
    loop inside (batch, channel block) tasks, so that a row tail (``OH % YB`` rows) is
    peeled off that loop instead of guarding every block of the parallel loop: when the
    rows leave a tail and there are at least 4 such tasks per thread."""
    if OH is None or K is None or OH % yb == 0:
        return False
    return (N or 1) * _ceil(K, ob) >= 4 * info.threads


def _schedule_pad_at(s: Schedule, pad: Tensor, st: Stage, axis, info: CpuModel,
                     vec_dim: int):
    """Compute the padding stage at ``st``'s loop ``axis`` (the region one iteration
    reads, with its halo), the dimension ``vec_dim`` vectorized."""
    ps = s[pad]
    ps.compute_at(st, axis)
    ax = ps.op.axis[vec_dim]
    ext = _cint(pad.shape[vec_dim])
    L = info.lanes
    if ext is not None and ext <= 64:
        # the region is at most this wide: one (wide) vector, masked where narrower
        _, vi = ps.split(ax, factor=ext)
        ps.vectorize(vi)
    else:
        _, vi = ps.split(ax, factor=L)
        ps.vectorize(vi)


def _conv_parallel(st: Stage, axes, exts, threads: int, min_tasks: int):
    """Fuse the leading axes until there are at least ``min_tasks`` tasks (or all are
    taken) and make the fused axis parallel; returns it."""
    take, total = [], 1
    for a, e in zip(axes, exts):
        take.append(a)
        total = total * e if (e is not None and total is not None) else None
        if total is None or total >= min_tasks:
            break
    ax = take[0] if len(take) == 1 else st.fuse(*take)
    if threads > 1:
        st.parallel(ax)
    return ax, len(take)


def _window(weight: Tensor) -> int:
    """The kernel window's size (``KH * KW``) of an OIHW ``weight`` (an unknown extent
    counted as 2: larger than 1x1)."""
    window = 1
    for e in weight.shape[2:]:
        window *= _cint(e) or 2
    return window


def _rows_per_task(N, nyc, T: int) -> int:
    """Row blocks per ``"rows"`` task (see :func:`_conv_tasks`): a divisor of the ``nyc``
    row blocks, at most 8, that leaves at least 8 tasks per thread, and among those the
    one whose busiest thread has the fewest rows (``ceil(tasks / T) * rows``: the pool
    gives each of the ``T`` threads as many tasks, give or take one), then the largest
    (fewer padded halo rows).  56 rows on 3 threads: 1 row a task (19 rows on the
    busiest thread; 2 rows a task, 28 tasks, 20); on 2 threads: 2 rows a task (28
    each).  A task's padded halo (``KH - 1`` input rows copied again) costs well under
    1% of a 3x3 row's FMAs, so it only breaks ties."""
    if nyc is None:
        return 1
    n = N or 1
    fits = [r for r in range(1, min(8, nyc) + 1)
            if nyc % r == 0 and (nyc // r) * n >= 8 * T]
    if not fits:
        return 1
    return min(fits, key=lambda r: (-(-(nyc // r) * n // T) * r, -r))


def _images_even(N, nt, rpt: int, T: int) -> bool:
    """Whether ``N`` whole images as the tasks leave the busiest of ``T`` threads no more
    rows than the ``N * nt`` (image, ``rpt`` row blocks) tasks would (9 images on 2
    threads: 5 images, 11% more than the 4.5 the row tasks give it)."""
    if N is None or nt is None:
        return True
    return -(-N // T) * nt * rpt <= -(-(N * nt) // T) * rpt


def _copy_tasks(N, noc, T: int) -> str:
    """The tasks of a convolution whose channel blocks copy their weights: the channel
    blocks alone where they are enough tasks (each copies its weights once for all the
    images; as (image, block) tasks, each image copied them again, which ran slower)
    (measurements: benchmarks/DECISIONS.md, "Conv tasks: channel blocks"), also with
    fewer blocks, for a batch, where they split evenly among the threads (on an 8x8
    plane the copy each image made cost about as much as its FMAs) (measurements:
    benchmarks/DECISIONS.md, "Conv tasks: channel blocks, split evenly"), else the
    (image, block) pairs where those are, else the rows of one block at a time."""
    nob = (N or 1) * noc if noc is not None else None
    if noc is not None and (noc >= 4 * T or (
            N is not None and N > 1 and noc >= T and noc % T == 0)):
        return "channels"
    if nob is not None and nob >= 4 * T:
        return "image_channels"
    return "block_rows"


def _conv_tasks(s: Schedule, st: Stage, cs: Stage, pad, weight, info: CpuModel, n, oc, yc,
                N, K, ob, OH, yb, pad_vec_dim: int, weight_vec_dim: Optional[int],
                weight_copy: bool = True, tasks: str = "", rows_per_task: int = 0):
    """Tasks, the padded input and the weights of a convolution whose output stage
    ``st`` has the loops ``n, oc, yc`` outermost and whose register block ``cs`` (the
    stage that reads the weights) is computed inside them.

    When the weights fit in a quarter of L2 (the 64-channel case: 147 KB), or there is
    one output-channel block, the tasks are (batch, row block) (whole images where there
    are 4 per thread and they split as evenly: :func:`_images_even`) and each task pads
    just the rows it reads (``compute_at``: its tile plus the halo), saving a pass over
    the input.  Otherwise the padded input is computed once, at the root,
    in its own parallel pass, and the channel blocks are outer loops.  When a block's
    weights are strided (``weight_vec_dim`` is their output-channel dimension: HWIO,
    or OIHW read across output channels, whose copy is stored with them innermost, see
    :func:`_weight_copy`) each block first copies them into a compact buffer
    (``cache_read``: sequential reads, L2-resident across the block's rows; the
    256-channel case has 2.4 MB of weights, so every row re-reading them from the
    strided tensor would stream 14x that); the tasks are then the channel blocks (each
    over all the images) when there are at least 4 per thread (or, with a batch, a
    number of them the threads divide: :func:`_copy_tasks`), else the (batch, channel
    block) pairs, or, when there are still fewer than 4 per thread, the row blocks of
    one channel block at a time (all the threads copying the block's weights first).
    With ``weight_copy`` False, a block whose weight vectors are contiguous already
    (HWIO) reads them in place instead, with the same tasks; so does every block of
    weights packed ahead of the call (:data:`PREPACKED_WEIGHT`).
    Small strided weights are copied once, at the root, into an aligned buffer (see the
    comment there), and small contiguous ones too unless ``weight_copy`` is False.
    When they are contiguous already (OIHW read as broadcasts) the
    tasks are (batch, channel block, row block).

    ``tasks`` / ``rows_per_task`` pin the choice (:class:`ConvParams`); "" / 0: the
    heuristic's, described above."""
    noc = _ceil(K, ob) if K is not None else None
    nyc = _ceil(OH, yb) if OH is not None else None
    T = info.threads
    small = _small_weights(weight, info)
    enough_rows = (N or 1) * (nyc or 1) >= 2 * T
    peel_rows = weight_vec_dim is None and _rows_peeled(N, K, ob, OH, yb, info)
    # the weight vectors are copied unless they are contiguous already and weight_copy
    # is off (a strided weight vector, a gather, is always copied)
    copy_weights = weight_vec_dim is not None and not prepacked(weight) and (
        weight_copy or weight_vec_dim != len(weight.shape) - 1)
    if not tasks:
        tasks = ("rows" if not peel_rows and (noc == 1 or (small and enough_rows)) else
                 "blocks" if weight_vec_dim is None else _copy_tasks(N, noc, T))
    if tasks == "rows":
        # the weights stay in L2 anyway: tasks are (batch, row block), each padding
        # just the rows it reads; the channel blocks are a loop inside the task.  A
        # task takes several (R) row blocks while there are still 8 tasks per thread:
        # it pads R*YB + KH - 1 input rows for R*YB output rows (with one 3x3 NHWC row
        # per task, 3 padded rows per output row; several rows per task were as fast or
        # a little faster) (measurements: benchmarks/DECISIONS.md, "Conv tasks: rows per task")
        rpt = rows_per_task or _rows_per_task(N, nyc, T)
        if rpt > 1 and (nyc is None or nyc % rpt):
            raise ScheduleError(f"conv2d schedule of {st.op.name}: rows_per_task={rpt} must "
                                f"divide the {nyc if nyc is not None else 'symbolic number of'}"
                                f" row blocks of {yb} rows; give a divisor, or 0 for the "
                                f"heuristic's")
        # whole images are the tasks where there are 4 per thread and they split as
        # evenly as the (image, rows) tasks would; else those
        nt = nyc // rpt if nyc is not None else None
        least = 4 * T if _images_even(N, nt, rpt, T) else (N or 1) * (nt or 1)
        if rpt > 1:
            yt, yr = st.split(yc, factor=rpt)
            st.reorder(n, yt, yr, oc)
            task, _ = _conv_parallel(st, [n, yt], [N, nt], T, least)
        else:
            st.reorder(n, yc, oc)
            task, _ = _conv_parallel(st, [n, yc], [N, nyc], T, least)
        if pad is not None:
            _schedule_pad_at(s, pad, st, task, info, pad_vec_dim)
        if copy_weights:
            # the weight vectors are read in place from the caller's array, which numpy
            # allocates at 16 bytes past a cache line when it is large: every 16-lane
            # load then straddles two lines.  A copy into tecomp's own (64-byte
            # aligned) buffer first: faster for such weights, about even for aligned
            # ones (measurements: benchmarks/DECISIONS.md, "Conv tasks: aligned weights").
            # Not where ``weight_copy`` is off (contiguous vectors, a CPU whose split
            # loads cost nothing: the copy, one core's, then cost the other core more
            # than the split loads; measurements: benchmarks/DECISIONS.md, "Conv tasks:
            # small weights in place on Zen 4")
            ww = s.cache_read(weight, "global", [cs])
            if weight_vec_dim != len(ww.shape) - 1:
                # (gathers: copied in parallel, a little faster or within the noise)
                # (measurements: benchmarks/DECISIONS.md, "Conv tasks: parallel weight gathers")
                intrin = _weight_transpose(weight, weight_vec_dim, ob, info, flips=s)
                _keep_flip(s, weight, intrin, info)
                blocks, _ = _weight_copy(s[ww], weight_vec_dim, ob, intrin=intrin)
                if T > 1:
                    s[ww].parallel(blocks)
            elif small:
                # a serial vector copy: as fast as a parallel one for small weights and
                # quicker to build (no outlined task)
                # (measurements: benchmarks/DECISIONS.md, "Conv tasks: serial weight copy")
                _vector_split(s[ww], s[ww].op.axis[-1], _cint(ww.shape[-1]), info.lanes)
            else:
                _schedule_elementwise_stage(s, ww, info)
    elif tasks == "blocks":
        # a block's weights are contiguous already: one parallel loop over (batch,
        # channel block, row block), channel blocks outer in the fused index so that a
        # chunk of consecutive tasks shares its weights.  When the row blocks leave a
        # tail, they are a serial loop in each (batch, channel block) task instead,
        # where loop partitioning peels the tail off (see _rows_peeled)
        task = st.fuse(n, oc) if peel_rows else st.fuse(n, oc, yc)
        if T > 1:
            st.parallel(task)
        if pad is not None:
            _schedule_elementwise_stage(s, pad, info)
    else:
        # each channel block copies its weights into a compact buffer once: with enough
        # blocks they are the tasks (each does all its rows); with few, the blocks run
        # in turn and their rows are the tasks
        if tasks == "channels":
            st.reorder(oc, n, yc)
            task = oc
            w_at = oc
        elif tasks == "image_channels":
            task = st.fuse(n, oc)
            w_at = task
        else:
            st.reorder(oc, n, yc)
            task = st.fuse(n, yc)
            w_at = oc
        if T > 1:
            st.parallel(task)
        if pad is not None:
            _schedule_elementwise_stage(s, pad, info)
        if copy_weights:
            ww = s.cache_read(weight, "local", [cs])
            ws = s[ww]
            ws.compute_at(st, w_at)
            shared = T > 1 and w_at is oc and task is not oc
            # a 1x1 window's block transposed in registers, or else copied row by row
            # when each task copies its own
            # (measurements: benchmarks/DECISIONS.md, "Conv NCHW: the weight copy's cost")
            intrin = _weight_transpose(weight, weight_vec_dim, ob, info, flips=s)
            _keep_flip(s, weight, intrin, info)
            _, loops = _weight_copy(ws, weight_vec_dim, ob,
                                    in_order=_window(weight) == 1 and weight_vec_dim == 0
                                    and not shared, intrin=intrin)
            if shared:
                # the blocks run in turn: copy each one's weights with all the threads
                # (faster with large blocks of weights)
                # (measurements: benchmarks/DECISIONS.md,
                #  "Conv tasks: block weights, all threads")
                ws.parallel(ws.fuse(*loops[:2]))
    st.pragma(st.leaf_iter_vars[0], "fp_contract")
    return task


def _weight_transpose(weight: Tensor, vec_dim: Optional[int], ob: int, info: CpuModel,
                      flips: Optional[Schedule] = None):
    """The ``x86.transpose_f32_LxL`` intrinsic for copying the OIHW ``weight`` across its
    output channels in ``L x L`` tiles of (output channels, ``C*KH*KW``) (each ``W[o]``
    is ``C*KH*KW`` contiguous elements: a 3x3 window's tile is affine in flattened
    memory only, see :mod:`tecomp.lower.tensorize`), where the target has it and the
    tiles divide ``C*KH*KW`` and the ``ob``-channel blocks; else None.  A window larger
    than 1x1 only for weights that are a placeholder or, with ``flips`` (a caller that
    keeps them a stage in the schedule ``flips``: :func:`_keep_flip`), flipped weights (:func:`_flip_kept`); any
    other computed one is inlined into the copy, whose tiles would then read the source
    through its indices (``W[o, 2 - ky, ...]``: not affine even in memory)."""
    if vec_dim != 0 or len(weight.shape) != 4 or (
            isinstance(weight.op, ComputeOp) and _window(weight) != 1 and
            not (flips is not None and _flip_kept(flips, weight))):
        return None
    C, KH, KW = (_cint(e) for e in weight.shape[1:])
    L = info.lanes
    if None in (C, KH, KW) or (C * KH * KW) % L or ob % L:
        return None

    return transpose_intrin(info.target, L, weight.dtype)


def _flip_kept(s: Schedule, weight: Tensor) -> bool:
    """Whether ``weight`` is a convolution's flipped weights (``conv2d_weight_flip``: a
    transposed convolution's phase, a data gradient's kernel) that the template computes
    at the root, in a pass of its own, so that its copy across the output channels is
    register transposes of that buffer's tiles (:func:`_weight_transpose`), not a
    strided gather from the source per vector (the flip inlined into the copy).
    1 thread, CPU time, interleaved, a loaded Zen 4 (load average 13.6), ms, DCGAN
    up-convolutions, 4x4 stride 2, batch 16: 512 to 256 channels on 4x4 (channel-vector
    phases) 16.13 gathered, 14.35 transposed (PyTorch 12.32); with Zen 5's machine
    facts (channel vectors for 8x8 phases too), on the same Zen 4, 256 to 128 on 8x8
    12.46 -> 12.08, 512 to 256 on 4x4 15.95 -> 14.18.  Not when ``s`` has them read a
    copy of the weights instead (``strategy.cpu.conv_nd._pack_flip_source``: the flip
    is then inlined into the convolution's copy, contiguous vectors of that copy)."""
    return isinstance(weight.op, ComputeOp) and \
        "conv2d_weight_flip" in (weight.op.tag or "").split(",") and \
        s[weight].op.input_tensors[0] is weight.op.input_tensors[0]


def _keep_flip(s: Schedule, weight: Tensor, intrin, info: CpuModel) -> None:
    """Flipped weights whose copy is transposed (``intrin``, :func:`_flip_kept`): a
    root stage of their own, scheduled here (not inlined into the copy by the rules)."""
    if intrin is None or not _flip_kept(s, weight) or s[weight].attach_type != "root" or \
            s[weight].relations:
        return
    st = s[weight]
    # in 16 x 16 tiles of its two channel axes (the flip swaps them: a row of the
    # source is a column here), so that each tile reads 16 runs of the source and
    # writes 16 runs of its own buffer
    a, b, ky, kx = st.op.axis
    _channel_tiles(st, (a, b), (ky, kx), False, info)


def _channel_tiles(st: Stage, channels, taps, taps_outside: bool, info: CpuModel) -> None:
    """``st`` in 16 x 16 tiles of its two ``channels`` axes, the tiles parallel (with
    threads), the ``taps`` axes inside each tile, outside its channel loops with
    ``taps_outside``."""
    (ao, ai), (bo, bi) = (st.split(x, factor=16) for x in channels)
    st.reorder(ao, bo, *((*taps, ai, bi) if taps_outside else (ai, bi, *taps)))
    tiles = st.fuse(ao, bo)
    if info.threads > 1:
        st.parallel(tiles)


def _weight_copy(ws: Stage, vec_dim: int, ob: int, in_order: bool = False, intrin=None):
    """Schedule ``ws``, a copy of a convolution's weights read as vectors of ``ob``
    output channels along dimension ``vec_dim``: that dimension vectorized in blocks of
    ``ob``.  When it is not the last one (OIHW read along O), the copy is stored with it
    innermost (``storage_order``) and made in the source's order: each of the block's
    rows is read sequentially, one gather across them per vector.  With ``in_order``
    (OIHW), the block's rows are copied one after the other instead, element by element
    (each read in turn, the stores ``ob`` apart): no gathers, faster for a 1x1 window's
    long rows on Zen 4, slower for a 3x3's.  With ``intrin`` (OIHW weights,
    :func:`_weight_transpose`), in ``L x L`` tiles of (``C*KH*KW``, output channels),
    each transposed in registers, ahead of both.  Returns the loop over the blocks and
    the other axes, outermost first (with ``in_order``, the one loop they are fused into;
    with ``intrin``, the loops over the tiles)."""
    axes = list(ws.op.axis)
    rest = axes[:vec_dim] + axes[vec_dim + 1:]
    wo, wv = ws.split(axes[vec_dim], factor=ob)
    if vec_dim != len(axes) - 1:
        ws.storage_order(*(rest + [axes[vec_dim]]))
        if intrin is not None:
            L = intrin.op.axis[0].dom.extent.value
            f = ws.fuse(*rest) if len(rest) > 1 else rest[0]
            co, vo, ci, vi = ws.tile(f, wv, L, L)
            ws.reorder(wo, co, vo, ci, vi)
            ws.tensorize(ci, intrin)
            return wo, [co, vo]
        if in_order:
            ws.reorder(wo, wv, *rest)
            return wo, [ws.fuse(*rest) if len(rest) > 1 else rest[0]]
        ws.reorder(wo, *rest, wv)
    ws.vectorize(wv)
    return wo, rest
