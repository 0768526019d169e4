"""Mistakes in calling tecomp.nn.flash_attention and its CUDA schedule: each raises a
TecompError subclass naming the tensor and saying how to fix it."""
import pytest

import tecomp as tc
from tecomp import nn
from tecomp.strategy.cuda import FlashConfig, schedule_flash_attention
from tecomp.strategy.cuda import schedule_flash_attention_backward as nn_cuda_backward


def _qkv(q=(1, 2, 40, 64), k=(1, 2, 50, 64), v=(1, 2, 50, 64), dtype="float16", kdtype=None):
    return (tc.placeholder(q, dtype, name="Q"), tc.placeholder(k, kdtype or dtype, name="K"),
            tc.placeholder(v, dtype, name="V"))


def test_mismatched_dtypes():
    q, k, v = _qkv(kdtype="bfloat16")
    with pytest.raises(tc.DTypeError, match=r"flash_attention flash: k \(K\) is bfloat16 but q "
                                            r"\(Q\) is float16; give them one dtype"):
        nn.flash_attention(q, k, v)


def test_float32_is_not_for_the_tensor_cores():
    q, k, v = _qkv(dtype="float32")
    with pytest.raises(tc.DTypeError, match=r"q \(Q\) is float32; FlashAttention runs on the "
                                            r"tensor cores, which take float16 or bfloat16"):
        nn.flash_attention(q, k, v)


@pytest.mark.parametrize("d", [72, 8, 256])
def test_a_head_dim_the_tensor_cores_do_not_take(d):
    q, k, v = _qkv(q=(1, 2, 40, d), k=(1, 2, 50, d), v=(1, 2, 50, d))
    with pytest.raises(tc.ShapeError, match=rf"q's head dim is {d}; the tensor-core "
                                            r"FlashAttention takes a multiple of 16 from 16 to "
                                            r"128 \(pad the head dim with zeros, or use "
                                            r"scaled_dot_product_attention"):
        nn.flash_attention(q, k, v)


def test_symbolic_length():
    n = tc.var("n")
    q, k, v = _qkv(q=(1, 2, n, 64))
    with pytest.raises(tc.ShapeError, match=r"q \(Q\).shape\[2\] = n is symbolic; "
                                            r"flash_attention takes constant shapes"):
        nn.flash_attention(q, k, v)


def test_causal_must_be_a_bool():
    q, k, v = _qkv()
    with pytest.raises(tc.ShapeError, match=r"causal must be True or False, got 'yes'"):
        nn.flash_attention(q, k, v, causal="yes")


def test_mismatched_keys():
    q, k, _ = _qkv()
    v = tc.placeholder((1, 2, 51, 64), "float16", name="V")
    with pytest.raises(tc.ShapeError, match=r"v \(V\) has 51 keys"):
        nn.flash_attention(q, k, v)


def test_schedule_takes_both_outputs():
    out, lse = nn.flash_attention(*_qkv())
    with pytest.raises(tc.ScheduleError, match=r"schedule_flash_attention takes the two outputs "
                                               r"of tecomp.nn.flash_attention, \(out, lse\), "
                                               r"got flash$"):
        schedule_flash_attention([out], target="cuda")


def test_schedule_refuses_a_tiling_that_does_not_divide():
    out, lse = nn.flash_attention(*_qkv())
    with pytest.raises(tc.ScheduleError, match=r"block_kv \(48, a multiple of 16\) the padded "
                                               r"column extent 128"):
        schedule_flash_attention([out, lse], target="cuda", config=FlashConfig(4, 48))


@pytest.mark.parametrize("stages", [0, 9, 2.0, True])
def test_config_stages_out_of_range(stages):
    out, lse = nn.flash_attention(*_qkv())
    with pytest.raises(tc.ScheduleError, match=r"stages is 1 \(the key and value tiles copied "
                                               r"where they are read\) or 2 to 8"):
        schedule_flash_attention([out, lse], target="cuda",
                                 config=FlashConfig(4, 16, stages=stages))


def test_config_form_of_another_name():
    out, lse = nn.flash_attention(*_qkv())
    with pytest.raises(tc.ScheduleError, match=r"form is 'shared' \(p in a shared tile\), "
                                               r"'registers' .* or 'fragments'"):
        schedule_flash_attention([out, lse], target="cuda",
                                 config=FlashConfig(4, 16, form="register"))


@pytest.mark.parametrize("form", ["shared", "registers"])
@pytest.mark.parametrize("field, what", [("ftz", r"the exps as ex2.approx.ftz"),
                                         ("exp2", r"the exps in base 2")])
def test_config_exps_of_another_form(form, field, what):
    """``ftz`` makes the exps of the fragment form's step ``ex2.approx.ftz``, ``exp2`` puts
    its rows' statistics in base-2 units; the other forms' exps are the computes' own
    (``__expf``): asking for either there is a mistake, not a silent no-op."""
    out, lse = nn.flash_attention(*_qkv())
    with pytest.raises(tc.ScheduleError, match=rf"{field} \({what}\) is the exps of "
                                               rf"form='fragments'.*; take that form or "
                                               rf"leave {field} False"):
        schedule_flash_attention([out, lse], target="cuda",
                                 config=FlashConfig(4, 16, form=form, **{field: True}))


@pytest.mark.parametrize("field, value", [("whole", "yes"), ("whole", 1), ("ftz", None),
                                          ("exp2", 1), ("exp2", "True"),
                                          ("diagonal_test", 0), ("diagonal_test", None)])
def test_config_whole_or_ftz_of_another_type(field, value):
    out, lse = nn.flash_attention(*_qkv(), causal=True)
    with pytest.raises(tc.ScheduleError, match=r"whole is None \(the template's rule\), True "
                                               r"or False, and ftz, exp2 and diagonal_test "
                                               r"True or False"):
        schedule_flash_attention([out, lse], target="cuda",
                                 config=FlashConfig(4, 16, form="fragments", **{field: value}))


@pytest.mark.parametrize("form, whole", [("shared", True), ("registers", None),
                                         ("fragments", None), ("fragments", False)])
@pytest.mark.parametrize("causal", [True, False])
def test_config_diagonal_test_without_the_tiles_it_drops(form, whole, causal):
    """``diagonal_test=False`` drops the test of each 16 x 16 diagonal tile that
    ``whole=True`` makes in the register and fragment forms: asked for where there is no
    such test (the shared form; ``whole`` None or False), it is a mistake, not a silent
    no-op (not causal too, as ``ftz`` with another form)."""
    out, lse = nn.flash_attention(*_qkv(), causal=causal)
    with pytest.raises(tc.ScheduleError, match=r"^FlashConfig\(.*diagonal_test=False\): "
                                               r"diagonal_test=False drops the test of each "
                                               r"16 x 16 tile .*; take whole=True and one of "
                                               r"those forms, or leave diagonal_test True"):
        schedule_flash_attention([out, lse], target="cuda", config=FlashConfig(
            4, 16, form=form, whole=whole, diagonal_test=False))


@pytest.mark.parametrize("field, value", [("warps", "4"), ("block_kv", 16.0),
                                          ("warp_rows", True), ("block_kv", None)])
def test_config_field_that_is_no_int(field, value):
    """A FlashConfig field that is no int (a string, a float, a bool, None) is named; it
    was a TypeError of a comparison, or a split's "factor must be a positive int, got
    64.0" naming a loop of the template."""
    out, lse = nn.flash_attention(*_qkv())
    cfg = FlashConfig(**{"warps": 4, "block_kv": 16, field: value})
    with pytest.raises(tc.ScheduleError, match=rf"{field} is an int, got {value!r}; take "
                                               r"one of FLASH_CONFIGS"):
        schedule_flash_attention([out, lse], target="cuda", config=cfg)


def test_forward_config_of_16_row_warps():
    """16-row warps are the backward's: in the forward the per-row statistics, spread
    over 32 * warps threads, reached past the block's rows into other blocks' (a
    ScheduleError about an unrolled loop deep in the template, or blocks writing the
    same rows of the statistics)."""
    out, lse = nn.flash_attention(*_qkv())
    with pytest.raises(tc.ScheduleError, match=r"the forward's warps take 32 query rows "
                                               r"each \(warp_rows=32, the default\); 16-row "
                                               r"warps are for "
                                               r"schedule_flash_attention_backward"):
        schedule_flash_attention([out, lse], target="cuda",
                                 config=FlashConfig(4, 16, warp_rows=16))


def test_schedule_is_for_cuda_targets():
    out, lse = nn.flash_attention(*_qkv())
    with pytest.raises(tc.ScheduleError, match=r"are for target 'cuda' or 'cuda-emu'"):
        schedule_flash_attention([out, lse], target="llvm")


def _bwd_args(o=(1, 2, 40, 64), do=(1, 2, 40, 64), lse=(1, 2, 40), do_dtype="float16"):
    q, k, v = _qkv()
    return (q, k, v, tc.placeholder(o, "float16", name="O"),
            tc.placeholder(do, do_dtype, name="dO"), tc.placeholder(lse, "float32", name="L"))


def test_backward_dout_of_another_shape():
    with pytest.raises(tc.ShapeError, match=r"flash_attention_backward flash_grad: dout \(dO\) "
                                            r"has shape \(1, 2, 41, 64\); it must be "
                                            r"\(1, 2, 40, 64\), as flash_attention's output"):
        nn.flash_attention_backward(*_bwd_args(do=(1, 2, 41, 64)))


def test_backward_dout_of_another_dtype():
    with pytest.raises(tc.DTypeError, match=r"dout \(dO\) has dtype bfloat16; give float16"):
        nn.flash_attention_backward(*_bwd_args(do_dtype="bfloat16"))


def test_backward_lse_of_another_shape():
    with pytest.raises(tc.ShapeError, match=r"lse \(L\) must be 3-d"):
        nn.flash_attention_backward(*_bwd_args(lse=(1, 2, 40, 1)))


def test_backward_schedule_takes_the_three_gradients():
    dq, dk, dv = nn.flash_attention_backward(*_bwd_args())
    with pytest.raises(tc.ScheduleError, match=r"schedule_flash_attention_backward takes the "
                                               r"three outputs of "
                                               r"tecomp.nn.flash_attention_backward, \(dq, dk, "
                                               r"dv\), got flash_grad.dq, "
                                               r"flash_grad.dkv.v0$"):
        nn_cuda_backward([dq, dk], target="cuda")


def test_gradient_of_the_logsumexp_is_refused():
    q, k, v = _qkv()
    _, lse = nn.flash_attention(q, k, v)
    with pytest.raises(tc.AutodiffError, match=r"tc.gradient: flash.lse, flash_attention's "
                                               r"logsumexp, has no derivative in tecomp yet; "
                                               r"differentiate its output"):
        tc.gradient(lse, [q])


def test_causal_tiles_pragma_from_a_schedule():
    """The pragma skips loop iterations: on a compute without the causal mask (here any
    user's) it left most of C unwritten, silently."""
    A = tc.placeholder((64, 64), name="A")
    C = tc.compute((64, 64), lambda i, j: A[i, j] * 2, name="C")
    s = tc.create_schedule(C.op)
    i, j = C.op.axis
    bo, ti = s[C].split(i, factor=32)
    s[C].bind(bo, tc.thread_axis("blockIdx.x"))
    s[C].bind(ti, tc.thread_axis("threadIdx.x"))
    with pytest.raises(tc.ScheduleError, match=r"pragma causal_tiles on stage C, axis j: the "
                                               r"pragma skips loop iterations, which is correct "
                                               r"only for the masked computes of "
                                               r"tecomp.nn.flash_attention"):
        s[C].pragma(j, "causal_tiles", "before 32 32")


def test_a_bool_mask_is_not_additive():
    q, k, v = _qkv()
    m = tc.placeholder((1, 1, 1, 50), "bool", name="M")
    with pytest.raises(tc.DTypeError, match=r"flash_attention flash: mask \(M\) is bool; "
                                            r"flash_attention takes an additive mask of q's "
                                            r"dtype float16"):
        nn.flash_attention(q, k, v, mask=m)


@pytest.mark.parametrize("shape,label", [((40, 50), "queries"), ((1, 2, 1, 50), "heads")])
def test_a_mask_that_is_not_over_the_keys_alone(shape, label):
    q, k, v = _qkv()
    m = tc.placeholder(shape, "float16", name="M")
    with pytest.raises(tc.ShapeError, match=rf"flash_attention flash: mask \(M\) has shape "
                                            rf".*; flash_attention takes a mask over the keys "
                                            rf"that broadcasts over the {label}"):
        nn.flash_attention(q, k, v, mask=m)


def test_a_mask_that_does_not_broadcast():
    q, k, v = _qkv()
    m = tc.placeholder((1, 1, 1, 49), "float16", name="M")
    with pytest.raises(tc.ShapeError, match=r"mask \(M\) has shape \(1, 1, 1, 49\), which does "
                                            r"not broadcast"):
        nn.flash_attention(q, k, v, mask=m)


def test_the_gradient_of_the_mask_has_no_cuda_template():
    q, k, v = _qkv(k=(1, 2, 40, 64), v=(1, 2, 40, 64))
    m = tc.placeholder((1, 40), "float16", name="M")
    head = tc.placeholder((1, 2, 40, 64), "float16", name="head")
    out, _ = nn.flash_attention(q, k, v, mask=m)
    grads = tc.gradient(out, [q, m], head=head)
    with pytest.raises(tc.ScheduleError, match=r"flash_grad.dmask, the gradient of "
                                               r"flash_attention's mask, has no CUDA template "
                                               r".*; ask tc.gradient for q, k and v only"):
        tc.auto_schedule([q, k, v, m, head, *grads], target="cuda")


def test_sdpa_backward_of_another_name():
    q, k, v = _qkv()
    with pytest.raises(tc.ArgumentError, match=r"scaled_dot_product_attention sdpa: backward is "
                                               r"\"stages\" \(tc.gradient differentiates the "
                                               r"stages\) or \"flash\" \(FlashAttention's "
                                               r"backward\), got 'flashy'"):
        nn.scaled_dot_product_attention(q, k, v, backward="flashy")


def test_sdpa_flash_backward_of_float32():
    q, k, v = _qkv(dtype="float32")
    with pytest.raises(tc.DTypeError, match=r"flash_attention sdpa.flash: q \(Q\) is float32; "
                                            r"FlashAttention runs on the tensor cores"):
        nn.scaled_dot_product_attention(q, k, v, backward="flash")


def test_backward_config_dq_of_another_name():
    grads = nn.flash_attention_backward(*_bwd_args())
    with pytest.raises(tc.ScheduleError, match=r"dq is \"atomic\" \(FlashAttention-2's five "
                                               r"GEMMs\) or \"recompute\" \(a second pass, "
                                               r"seven\), got 'atomics'"):
        nn_cuda_backward(list(grads), target="cuda", config=FlashConfig(dq="atomics"))


def test_backward_config_whose_warps_cannot_share_dq():
    grads = nn.flash_attention_backward(*_bwd_args())
    with pytest.raises(tc.ScheduleError, match=r"with dq \"atomic\" the warps \(8\) share the "
                                               r"16 x 64 tile of dq in tiles of 16 x 16; take "
                                               r"another tiling \(or dq=\"recompute\"\)"):
        nn_cuda_backward(list(grads), target="cuda", config=FlashConfig(8, 16, 16))
