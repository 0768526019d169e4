"""The correctness sweep of ``torch.compile(model, backend="tecomp")`` over a zoo of
models built from their code with random weights (nothing downloaded): torchvision's
classification models, transformers' BERT, GPT-2 and DistilBERT in small configurations.

Each model runs in its own process (a crash or a hang is reported, not fatal), in
inference (``model.eval()``, ``torch.no_grad()``), batch 1, at a small input (64 x 64
images by default; 32 tokens for the language models), eager PyTorch against the
compiled model on the same input.  Reported per model:

* ``max rel err``: max |compiled - eager| / max |eager| over the output (the criterion:
  at most 1e-4), and beside it eager float32 against eager float64 (float32's own
  rounding error on this model, for scale);
* ``fallbacks``: the ATen operators that ran eagerly (the backend's log line per
  unsupported operator, with its reason) and the regions that failed to compile;
* ``compile s``: the first call of the compiled model (TorchDynamo's tracing, the
  lowering, scheduling and LLVM), with an empty kernel cache unless ``--cache-dir``;
* ``kernels``: the tecomp kernels built (and loaded from the cache);
* ``calls differ``: the second call (which reuses the intermediates the first kept) and
  a call after ``tc.release_workspace()`` against the first (counted in the criterion).

``--train``: a training step instead (``model.train()``, dropout and stochastic depth
off, batch 2): the output and every parameter's gradient of ``sum(output * w)``, ``w``
random, compiled against eager; the gradients' error is max |g - g_eager| over all
parameters / max |g_eager| over all of them.  Batch norm over 2 images normalises a
few values per channel at the last stages (1 x 1 at 32 x 32 images: 2 values), where
float32 itself is ill-conditioned: read the float32 vs float64 column beside it, and
the compiled gradients against float64's (as far from them as eager's: rounding).

    python3 benchmarks/torch_compile_zoo.py [--models resnet18,bert,...] [--size 64]
                                            [--threads 1] [--timeout 600] [--train]
                                            [--cache-dir DIR] [--json out.json]

Models not installed (torchvision, transformers) are reported as skipped.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: torchvision classification models (builder name, smallest convenient image side)
VISION = {
    "resnet18": 64, "resnet50": 64, "resnext50_32x4d": 64, "mobilenet_v2": 64,
    "mobilenet_v3_small": 64, "mobilenet_v3_large": 64, "efficientnet_b0": 64,
    "densenet121": 64, "squeezenet1_1": 64, "shufflenet_v2_x0_5": 64, "mnasnet0_5": 64,
    "regnet_y_400mf": 64, "vgg11": 64, "alexnet": 64, "googlenet": 64,
    "convnext_tiny": 64, "vit_b_16": 64, "swin_t": 64,
}
#: transformers models in small configurations (batch 1 x 32 tokens)
TEXT = ("bert", "gpt2", "distilbert")
MODELS = list(VISION) + list(TEXT)
TOKENS = 32


def import_torchvision():
    """``torchvision``, or None where it is not installed.  A torchvision wheel whose C
    extension does not load against this torch (a CUDA build beside a CPU torch) fails
    on import at its unguarded fake registrations of ``nms``/``qnms``; those two schemas
    are defined first then (the models need none of its C operators)."""
    import torch

    try:
        import torchvision
        return torchvision
    except ImportError:
        return None
    except RuntimeError as e:
        if "torchvision::nms" not in str(e):
            raise
    for k in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
        del sys.modules[k]
    global _TV_LIB
    _TV_LIB = torch.library.Library("torchvision", "DEF")  # kept alive: owns the schemas
    for op in ("nms", "qnms"):
        _TV_LIB.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import torchvision
    return torchvision


_TV_LIB = None


def build(name: str, size: int):
    """(model in eval mode, example input, description) for ``name``, random weights."""
    import torch

    torch.manual_seed(0)
    tv = import_torchvision()  # first: transformers imports torchvision where it can
    if name in VISION:
        if tv is None:
            raise ModuleNotFoundError("torchvision is not installed")
        kw = {"image_size": size} if name.startswith("vit_") else {}
        if name == "googlenet":
            kw = {"aux_logits": False, "init_weights": True}
        model = getattr(tv.models, name)(weights=None, **kw)
        x = torch.randn(1, 3, size, size)
        _calibrate(model, size)
        return model.eval(), (x,), f"1x3x{size}x{size}"
    import transformers as tf

    if name == "bert":
        cfg = tf.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=512,
                            max_position_embeddings=64)
        model = tf.BertModel(cfg)
        what = "BERT h128 L2 A4 ff512"
    elif name == "gpt2":
        cfg = tf.GPT2Config(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_positions=64,
                             bos_token_id=0, eos_token_id=0)
        model = tf.GPT2Model(cfg)
        what = "GPT-2 h128 L2 A4"
    elif name == "distilbert":
        cfg = tf.DistilBertConfig(vocab_size=1000, dim=128, n_layers=2, n_heads=4,
                                  hidden_dim=512, max_position_embeddings=64)
        model = tf.DistilBertModel(cfg)
        what = "DistilBERT h128 L2 A4 ff512"
    else:
        raise KeyError(name)
    ids = torch.randint(0, 1000, (1, TOKENS))
    return model.eval(), (ids,), f"{what}, 1x{TOKENS} tokens"


def _calibrate(model, size: int) -> None:
    """Make the random model's output say something: weight matrices that are all zero
    (ViT's classifier: its output would be zero) drawn at random, and the batch norms'
    running statistics set to those of a random batch (one training forward, cumulative
    averages): with the initial statistics (mean 0, variance 1) in eval mode the
    activations of a randomly initialised network vanish or blow up with depth
    (GoogLeNet's reach 1e-11 before its classifier: its output is then its bias)."""
    import torch

    with torch.no_grad():  # a zero-initialised classifier (ViT's head) outputs zeros
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.normal_(0.0, 0.02)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    with torch.no_grad():
        model(torch.randn(4, 3, size, size))


def _tensor_out(y):
    """The main output tensor of a model's result."""
    import torch

    if isinstance(y, torch.Tensor):
        return y
    if hasattr(y, "last_hidden_state"):
        return y.last_hidden_state
    if isinstance(y, (tuple, list)):
        return _tensor_out(y[0])
    if hasattr(y, "logits"):
        return y.logits
    raise TypeError(f"no tensor in {type(y).__name__}")


def max_rel_error(got, want) -> float:
    """max |got - want| / max |want| (in float64)."""
    got, want = got.detach().double(), want.detach().double()
    return float((got - want).abs().max()) / max(float(want.abs().max()), 1e-30)


class _Collect(logging.Handler):
    """The backend's lines about operators that ran eagerly and regions that failed."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.eager, self.failed = {}, []

    def emit(self, record):
        msg = record.getMessage()
        m = re.match(r"tecomp\.dynamo: (\S+) runs eagerly in the (\w+) graph \((\d+) nodes?\):"
                     r" (.*)", msg)
        if m:
            self.eager.setdefault(m.group(1), m.group(4))
        elif "could not be compiled" in msg or "could not be scheduled" in msg:
            self.failed.append(msg[:400])


def _start(name: str, size: int):
    """The child's model, inputs, their description and the log collector, or None
    (after a RESULT line) where the model's package is not installed."""
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    try:
        model, inputs, what = build(name, size)
    except ModuleNotFoundError as e:
        print("RESULT " + json.dumps({"model": name, "skipped": str(e)}), flush=True)
        return None
    handler = _Collect()
    lg = logging.getLogger("tecomp.dynamo")
    lg.addHandler(handler)
    lg.setLevel(logging.INFO)
    return model, inputs, what, handler


def _child(name: str, size: int) -> None:
    import torch

    import tecomp
    import tecomp.dynamo

    started = _start(name, size)
    if started is None:
        return
    model, inputs, what, handler = started
    with torch.no_grad():
        want = _tensor_out(model(*inputs))
        compiled = torch.compile(model, backend="tecomp")
        t0 = time.perf_counter()
        got = _tensor_out(compiled(*inputs))
        compile_s = time.perf_counter() - t0
        again = _tensor_out(compiled(*inputs))
        # the second call reuses the intermediates the first kept; after
        # tc.release_workspace() a third allocates them again: all three agree
        tecomp.release_workspace()
        released = _tensor_out(compiled(*inputs))
    err = max(max_rel_error(got, want), max_rel_error(again, want),
              max_rel_error(released, want))
    calls_differ = max(max_rel_error(again, got), max_rel_error(released, got))
    # the float32 noise floor: eager float32 against eager float64 (copies of the model)
    torch._dynamo.reset()
    import copy

    with torch.no_grad():
        ref64 = _tensor_out(copy.deepcopy(model).double()(
            *[x.double() if x.is_floating_point() else x for x in inputs]))
    floor = max_rel_error(want, ref64)
    print("RESULT " + json.dumps({
        "model": name, "input": what, "max_rel_err": err, "compile_s": compile_s,
        "scale": float(want.abs().max()), "spread": float(want.double().std()),
        "eager_f32_vs_f64": floor, "calls_differ": calls_differ,
        "eager_ops": handler.eager, "failed": handler.failed,
        "stats": dict(tecomp.dynamo.STATS)}), flush=True)


def _no_dropout(model) -> None:
    """Dropout and stochastic depth off (probability 0): a training step then computes
    the same function eagerly and compiled."""
    for m in model.modules():
        kind = type(m).__name__
        if ("Dropout" in kind or kind == "StochasticDepth") and isinstance(
                getattr(m, "p", None), float):
            m.p = 0.0
        for attr in ("dropout_prob", "attention_dropout", "dropout"):
            if isinstance(getattr(m, attr, None), float):
                setattr(m, attr, 0.0)
    cfg = getattr(model, "config", None)
    for attr in ("hidden_dropout_prob", "attention_probs_dropout_prob", "resid_pdrop",
                 "embd_pdrop", "attn_pdrop", "dropout", "attention_dropout"):
        if cfg is not None and isinstance(getattr(cfg, attr, None), float):
            setattr(cfg, attr, 0.0)


def _grads(model, inputs, weight) -> list:
    """The parameters' gradients of sum(output * weight) (weight: the output's shape)."""
    import torch

    model.zero_grad(set_to_none=True)
    y = _tensor_out(model(*inputs))
    (y * weight.to(y.dtype)).sum().backward()
    return y.detach(), [p.grad.detach().clone() if p.grad is not None else
                        torch.zeros_like(p) for p in model.parameters()]


def _grad_error(got: list, want: list) -> float:
    """max over the parameters of |got - want|, over max |want| over all of them."""
    scale = max(float(w.double().abs().max()) for w in want)
    return max(float((g.double() - w.double()).abs().max()) for g, w in zip(got, want)) \
        / max(scale, 1e-30)


def _child_train(name: str, size: int) -> None:
    """A training step (model.train(), dropout off, batch 2): the output and every
    parameter's gradient of sum(output * w), compiled against eager, twice (the second
    step reuses kept intermediates) and once more after ``tc.release_workspace()``."""
    import copy

    import torch

    import tecomp
    import tecomp.dynamo

    started = _start(name, size)
    if started is None:
        return
    model, inputs, what, handler = started
    inputs = tuple(torch.cat([x, x.flip(0) if x.is_floating_point() else (x + 7) % 1000])
                   for x in inputs)  # batch 2 (batch norm needs two values per channel)
    what = what.replace("1x", "2x", 1)
    model.train()
    _no_dropout(model)
    ref64 = copy.deepcopy(model).double()
    mine = copy.deepcopy(model)
    with torch.no_grad():
        shape = _tensor_out(copy.deepcopy(model)(*inputs)).shape
    torch.manual_seed(1)
    weight = torch.randn(shape)
    want_y, want = _grads(model, inputs, weight)
    compiled = torch.compile(mine, backend="tecomp")
    t0 = time.perf_counter()
    got_y, got = _grads(compiled, inputs, weight)
    compile_s = time.perf_counter() - t0
    again_y, again = _grads(compiled, inputs, weight)
    tecomp.release_workspace()
    rel_y, rel = _grads(compiled, inputs, weight)
    err = max(max_rel_error(y, want_y) for y in (got_y, again_y, rel_y))
    gerr = max(_grad_error(g, want) for g in (got, again, rel))
    differ = max(_grad_error(again, got), _grad_error(rel, got),
                 max_rel_error(again_y, got_y), max_rel_error(rel_y, got_y))
    y64, g64 = _grads(ref64, tuple(x.double() if x.is_floating_point() else x
                                   for x in inputs), weight)
    print("RESULT " + json.dumps({
        "model": name, "input": what + " train", "max_rel_err": max(err, gerr),
        "out_err": err, "grad_err": gerr, "compile_s": compile_s,
        "scale": float(want_y.abs().max()), "spread": float(want_y.double().std()),
        "eager_f32_vs_f64": max(max_rel_error(want_y, y64), _grad_error(want, g64)),
        "out_floor": max_rel_error(want_y, y64), "grad_floor": _grad_error(want, g64),
        "grad_vs_f64": max(_grad_error(g, g64) for g in (got, again, rel)),
        "calls_differ": differ, "eager_ops": handler.eager, "failed": handler.failed,
        "stats": dict(tecomp.dynamo.STATS)}), flush=True)


def run_one(name: str, size: int, threads: int, timeout: float, cache_dir: str,
            train: bool = False) -> dict:
    env = dict(os.environ, TECOMP_CACHE_DIR=cache_dir, PYTHONPATH=ROOT)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                "TECOMP_NUM_THREADS"):
        env[var] = str(threads)
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, __file__, "--child-train" if train else "--child",
                            name, str(size)],
                           capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": name, "error": f"timed out after {timeout:.0f} s"}
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["wall_s"] = time.perf_counter() - t0
            return r
    tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
    return {"model": name, "error": f"exit {p.returncode}: {' | '.join(tail)[:600]}"}


def _line(r: dict) -> str:
    if "skipped" in r:
        return f"{r['model']:<20} skipped: {r['skipped']}"
    if "error" in r:
        return f"{r['model']:<20} ERROR: {r['error']}"
    ok = "ok " if max(r["max_rel_err"], r.get("calls_differ", 0.0)) <= 1e-4 else "BAD"
    if not r["spread"] > 1e-6 * r["scale"]:
        ok = "VAC"  # a constant output: the comparison says nothing
    eager = ", ".join(f"{op} ({why})" for op, why in sorted(r["eager_ops"].items())) or "-"
    st = r["stats"]
    if "grad_err" in r:
        ok += (f" (output {r['out_err']:.1e}, float32 vs float64 {r['out_floor']:.1e}; "
               f"gradients {r['grad_err']:.1e}, float32 vs float64 {r['grad_floor']:.1e}, "
               f"compiled vs float64 {r['grad_vs_f64']:.1e})")
    s = (f"{r['model']:<20} {ok} {r['input']:<34} err {r['max_rel_err']:.2e} (max |y| "
         f"{r['scale']:.2g}, std {r['spread']:.2g}; eager f32 vs f64 "
         f"{r.get('eager_f32_vs_f64', float('nan')):.1e}; calls differ "
         f"{r.get('calls_differ', float('nan')):.1e})  compile "
         f"{r['compile_s']:6.1f} s  kernels built {st.get('built', 0)} disk "
         f"{st.get('disk', 0)} failed {st.get('failed', 0)}  eager: {eager}")
    for f in r["failed"]:
        s += f"\n    {f}"
    return s


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]))
        return 0
    if len(sys.argv) > 1 and sys.argv[1] == "--child-train":
        _child_train(sys.argv[2], int(sys.argv[3]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--size", type=int, default=0, help="image side (0: each model's own)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--cache-dir", default=None, help="kernel cache (default: a fresh one "
                    "per model, so compile times are cold)")
    ap.add_argument("--json", default=None, help="also write the results here")
    ap.add_argument("--train", action="store_true", help="a training step (batch 2, "
                    "dropout off): the output and the parameters' gradients")
    args = ap.parse_args()
    sys.path.insert(0, HERE)
    sys.path.insert(1, ROOT)
    from workloads import machine

    print(f"# {machine()}, {args.threads} thread(s)", flush=True)
    results = []
    for name in args.models.split(","):
        size = args.size or VISION.get(name, 0)
        if args.cache_dir:
            r = run_one(name, size, args.threads, args.timeout, args.cache_dir, args.train)
        else:
            with tempfile.TemporaryDirectory(prefix="tecomp-zoo-cache-") as cache:
                r = run_one(name, size, args.threads, args.timeout, cache, args.train)
        results.append(r)
        print(_line(r), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    bad = [r["model"] for r in results
           if "max_rel_err" in r and max(r["max_rel_err"], r.get("calls_differ", 0.0)) > 1e-4]
    crashed = [r["model"] for r in results if "error" in r]
    print(f"# {len(results)} models: {len(bad)} over 1e-4 ({', '.join(bad) or '-'}), "
          f"{len(crashed)} errors ({', '.join(crashed) or '-'})", flush=True)
    return 1 if bad or crashed else 0


if __name__ == "__main__":
    sys.exit(main())
