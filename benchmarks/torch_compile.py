"""torch.compile(model, backend="tecomp") against PyTorch eager and Inductor
(``torch.compile`` default), interleaved in one process, medians.

Models (random weights, nothing downloaded):

* ``bert``: a BERT encoder, inference, fp32 (transformers' ``BertModel(BertConfig())``
  with ``--layers`` layers where transformers is installed, else the hand-written
  encoder of examples/torch_compile_bert.py), batch 1 and 8 x 128;
* ``cnn-train``: a small CNN (conv + batch norm + ReLU + pool, twice, + linear), one
  training step (forward, backward, SGD), batch 32 x 3 x 32 x 32;
* ``bert-layer-train``: one BERT layer (hidden 768), one training step, batch 8 x 128;
* ``resnet50``: torchvision's ResNet-50, inference, fp32, batch 1 and 8 x 3 x 224 x 224
  (eval mode, the batch norms' running statistics those of a random batch).
* ``resnet50-downsample``: one layer of it, the 1x1 512->1024 stride-2 downsample over
  28x28 with its batch norm, inference, batch 1 and 8.

Each configuration runs in a fresh process per thread count (``--threads``, default
1,2), so every tool starts its thread pool with that count.  Compile time: the first call
of the tecomp-compiled model with an empty kernel cache (cold) and, in another process,
with the cache the first filled (warm); TorchDynamo's tracing is in both.

    python3 benchmarks/torch_compile.py [--models bert,cnn-train,bert-layer-train,resnet50,
                                                  resnet50-downsample]
                                        [--threads 1,2] [--rounds 5] [--layers 12]
                                        [--profile] [--other-threads]
                                        [--ab prepack,no-strided-gemm,no-gemm-by-channels,
                                              no-flat-epilogue,no-fold-tail,
                                              own-pools,no-keep,threads-tecomp,
                                              threads-torch] [--cpu]

Prints the CPU, then one line per configuration: medians in ms and the ratios (eager
time / tecomp time, Inductor time / tecomp time; above 1: tecomp is faster).

``--other-threads`` adds a fourth tool to the same turns: the tecomp backend with the
option ``threads="torch"`` (``"tecomp"`` where that is the default; see the backend's
options).

``--ab prepack,no-strided-gemm,no-gemm-by-channels,no-flat-epilogue,no-fold-tail,...`` (the
ResNet-50 cases;
the training steps take ``no-keep``, ``threads-tecomp``, ``threads-torch``) adds variants
of the tecomp backend to the same turns, each printed with its time over the default's:
``prepack`` the option ``prepack=True`` (the convolutions' weights packed into the
kernels' layouts once, not copied at every call), ``no-strided-gemm`` the strided 1x1
convolutions left to the convolution template instead of a subsampled copy and a GEMM,
``no-gemm-by-channels`` the 1x1 convolutions on 7x7 and 56x56 planes that the lowering
writes as GEMMs for their channels (``lowering_nn.GEMM_1X1_BY_CHANNELS``) left to the
convolution template, ``no-flat-epilogue`` the batch norm, residual add and ReLU of a 1x1
convolution written as a GEMM applied in a second pass over its output instead of to
each register block of the GEMM on its way out (``tecomp.strategy.rules.FUSE_FLAT_EPILOGUES``),
``no-fold-tail`` the pixels past the last whole vector of a GEMM's plane (14x14, 7x7)
left to a narrow register block per image instead of one GEMM over all the images
(``lowering_nn.GEMM_1X1_FOLD_TAIL``)
(these four compiled without the disk cache: their kernels run on
the JIT's one pool, as the default's, loaded from the disk cache, run on the process's
first pool; an empty ``TECOMP_CACHE_DIR`` builds the default's in the process too), ``own-pools``
the default's kernels with the thread pools of the libraries loaded from the disk cache
(one each) running their loops on their own threads (``tecomp.dynamo.cache.SHARE_POOLS``
off), ``no-keep`` the default's kernels with no released intermediates kept from one
call to the next (``tecomp.dynamo.graph.KEEP_BETWEEN_CALLS`` off: each call allocates
its kernels' outputs anew), ``threads-tecomp`` and ``threads-torch`` (training steps)
the option ``threads`` set so instead of its default ``"auto"``.

``--cpu`` reads each call's process CPU time (all threads) instead of its wall time: on
a loaded machine it leaves out the time the process waited for a core, a fair figure at
one thread (with more, threads that spin while they wait count too).

``--profile`` adds a per-kernel breakdown of the tecomp-compiled step: each distinct
kernel once (the graph it is in -- inference, forward or backward --, its ATen operators,
input shapes and how many times a step calls it), its median time per call against the
same nodes run by eager PyTorch (the ATen operators: MKL/oneDNN for the GEMMs), the two
taking turns with the inputs of a real step, and the time a step spends between kernels
(the plan's Python, the eager nodes, the output allocations, and in training PyTorch's
own work: the loss, autograd, the optimizer): the step's median less the kernels' sum.
Each also as its least process CPU time (all threads), which on a loaded machine leaves
out the time the process waited for a core (at one thread a fair figure; with more,
spinning threads count), and, with more than one thread, as the least CPU time of its
busiest thread (Linux): what its wall time would be with every thread on a core of its
own, so that how a kernel's work divides among the threads shows under load too.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _bert(layers: int):
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import torch_compile_bert as ex

    args = argparse.Namespace(layers=layers, hidden=768, hand_written=False)
    return ex.build_model(args)


def _cnn(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 8 * 8, 10))


def _downsample(torch):
    """ResNet-50's layer3 downsample (conv 1x1 512->1024 stride 2 over 28x28, its batch
    norm), eval mode, random weights and statistics."""
    nn = torch.nn
    m = nn.Sequential(nn.Conv2d(512, 1024, 1, stride=2, bias=False), nn.BatchNorm2d(1024))
    with torch.no_grad():
        m[1].running_mean.normal_()
        m[1].running_var.uniform_(0.5, 2.0)
    return m.eval()


#: the tool of ``--other-threads``: the backend with the option threads not its default's
OTHER = "tecomp-other-threads"


def _other_threads() -> str:
    from tecomp.dynamo import Options

    return "tecomp" if Options().threads == "torch" else "torch"  # (default "auto")


def _tool_options(tool: str) -> dict:
    if tool.startswith("tecomp threads-"):  # (an --ab variant)
        return {"threads": tool[len("tecomp threads-"):]}
    return {"threads": _other_threads()} if tool == OTHER else {}


def _other_threads_tool(model) -> dict:
    """With ``--other-threads``: the tool :data:`OTHER`, else none."""
    if os.environ.get("BENCH_TECOMP_OTHER_THREADS") != "1":
        return {}
    import torch

    return {OTHER: torch.compile(model, backend="tecomp", options=_tool_options(OTHER))}


#: the variants ``--ab`` can add to the turns: the backend with an option not its
#: default's, or a lowering switched off (compiled without the disk cache, whose keys do
#: not know the switch)
VARIANTS = ("prepack", "no-strided-gemm", "no-gemm-by-channels", "no-flat-epilogue",
            "no-fold-tail", "own-pools", "no-keep",
            "threads-tecomp", "threads-torch")

#: the variants that switch a lowering or a scheduling rule off: (the module, its
#: attribute, its value then)
LOWERING_SWITCHES = {"no-strided-gemm": ("tecomp.dynamo.lowering_nn", "GEMM_1X1_STRIDED", False),
                     "no-gemm-by-channels": ("tecomp.dynamo.lowering_nn", "GEMM_1X1_BY_CHANNELS",
                                             None),
                     "no-flat-epilogue": ("tecomp.strategy.rules", "FUSE_FLAT_EPILOGUES", False),
                     "no-fold-tail": ("tecomp.dynamo.lowering_nn", "GEMM_1X1_FOLD_TAIL", None)}
#: the variants that apply to the training steps
TRAIN_VARIANTS = ("no-keep", "threads-tecomp", "threads-torch")


def _switched(v, fn):
    """``fn`` run with the switch of variant ``v`` thrown (``no-keep``: the plans keep
    no released intermediates between calls, ``tecomp.dynamo.graph.KEEP_BETWEEN_CALLS``
    off), restored after it."""
    if v != "no-keep":
        return fn
    from tecomp.dynamo import graph

    def call(*a, **k):
        graph.KEEP_BETWEEN_CALLS = False
        graph.release_spare()
        try:
            return fn(*a, **k)
        finally:
            graph.KEEP_BETWEEN_CALLS = True
    return call


def _own_pools(fn):
    """``fn`` run with every loaded library's thread pool on its own threads (the
    default runs them on the process's first pool: ``tecomp.dynamo.cache.SHARE_POOLS``,
    :func:`tecomp.threads.share_pool`), each on the first pool again after it."""
    from tecomp import threads

    first = next((p for p in threads._POOLS if p.parallel_for), None)
    pools = [p for p in threads._POOLS if p.delegate_to is not None and p is not first]

    def call(*a, **k):
        for p in pools:
            p.delegate_to(None)
        try:
            return fn(*a, **k)
        finally:
            for p in pools:
                threads.share_pool(p.owner)
    return call


def _variant_tools(model, run) -> dict:
    """With ``--ab``: each variant of :data:`VARIANTS` named there, as the tool
    ``tecomp <variant>``, compiled by its first call ``run(fn)`` (under its switch)."""
    names = [v for v in os.environ.get("BENCH_TECOMP_AB", "").split(",")
             if v and not v.startswith("threads-")]  # (those: the training steps')
    if not names:
        return {}
    import copy

    import torch
    from tecomp.dynamo import cache as dcache
    out = {}
    for v in names:
        opts = {"prepack": True} if v == "prepack" else {} if v in ("own-pools", "no-keep") \
            else {"cache": False}
        fn = torch.compile(copy.deepcopy(model), backend="tecomp", options=opts)
        if v == "no-keep":
            out[f"tecomp {v}"] = _switched(v, fn)
            continue
        if v == "own-pools":
            run(fn)   # (the default's kernels, loaded by it from the disk cache)
            out[f"tecomp {v}"] = _own_pools(fn)
            continue
        switch = LOWERING_SWITCHES.get(v)
        if switch is not None:
            module = importlib.import_module(switch[0])
            was = getattr(module, switch[1])
            setattr(module, switch[1], switch[2])
            dcache.clear_memory()
        try:
            run(fn)
        finally:
            if switch is not None:
                setattr(module, switch[1], was)
                dcache.clear_memory()
        out[f"tecomp {v}"] = fn
    return out


def _case(name: str, batch: int, layers: int):
    """(model step functions by tool, what) for one configuration; a step is a
    zero-argument callable."""
    import torch

    torch.manual_seed(0)
    if name == "bert":
        model, what = _bert(layers)
        ids = torch.randint(0, 30522, (batch, 128))
        tools = {"eager": model, "inductor": torch.compile(model),
                 "tecomp": torch.compile(model, backend="tecomp")}
        tools.update(_other_threads_tool(model))

        def step(fn):
            with torch.no_grad():
                return fn(ids)
        return {k: (lambda f=f: step(f)) for k, f in tools.items()}, f"{what}, batch {batch}x128"
    if name in ("resnet50", "resnet50-downsample"):
        if name == "resnet50":
            sys.path.insert(0, HERE)
            from torch_compile_zoo import build

            model, _, _ = build("resnet50", 224)  # eval mode, calibrated statistics
            img = torch.randn(batch, 3, 224, 224)
            what = f"ResNet-50 (torchvision), batch {batch}x3x224x224"
        else:
            model = _downsample(torch)
            img = torch.randn(batch, 512, 28, 28)
            what = f"ResNet-50's downsample 1x1 512->1024 stride 2 + batch norm, batch {batch}"
        tools = {"eager": model, "inductor": torch.compile(model),
                 "tecomp": torch.compile(model, backend="tecomp")}
        tools.update(_other_threads_tool(model))

        def infer(fn):
            with torch.no_grad():
                return fn(img)
        tools.update(_variant_tools(model, infer))
        return {k: (lambda f=f: infer(f)) for k, f in tools.items()}, what
    if name == "cnn-train":
        model = _cnn(torch)
        x, labels = torch.randn(batch, 3, 32, 32), torch.randint(0, 10, (batch,))
        what = f"small CNN training step, batch {batch}"
    else:
        sys.path.insert(0, os.path.join(ROOT, "examples"))
        from torch_compile_bert import Layer

        model = Layer(768, 12, 3072)
        x = torch.randn(batch, 128, 768)
        mask = torch.zeros(batch, 1, 1, 128)
        labels = None
        what = f"BERT layer training step, batch {batch}x128"
    import copy

    tools = {}
    variants = [v for v in os.environ.get("BENCH_TECOMP_AB", "").split(",")
                if v in TRAIN_VARIANTS]
    for tool in ("eager", "inductor", "tecomp") + tuple(_other_threads_tool(model)) + \
            tuple(f"tecomp {v}" for v in variants):
        m = copy.deepcopy(model)
        opt = torch.optim.SGD(m.parameters(), lr=1e-3)
        fn = m if tool == "eager" else torch.compile(m) if tool == "inductor" else \
            torch.compile(m, backend="tecomp", options=_tool_options(tool))

        def train_step(fn=fn, opt=opt):
            opt.zero_grad(set_to_none=True)
            if labels is not None:
                loss = torch.nn.functional.cross_entropy(fn(x), labels)
            else:
                loss = fn(x, mask).square().mean()
            loss.backward()
            opt.step()
            return loss
        # (a variant's switch thrown for the whole step: its backward graph runs in
        # loss.backward())
        tools[tool] = _switched(tool[7:], train_step) if tool.startswith("tecomp ") else \
            train_step
    return tools, what


def _kernel_profile(fns, rounds: int) -> dict:
    """The per-kernel breakdown of ``--profile`` (see the module docstring): the
    tecomp-compiled step's plans (tecomp.dynamo.graph's internals: inference, or forward
    and backward) run once with their kernels' inputs kept, then each distinct kernel and
    its nodes run eagerly, taking turns."""
    import statistics

    import torch
    from common import interleaved_turns
    from tecomp.dynamo import graph as G

    seen = {}
    run = G._Plan.run

    def keep(plan, args):
        env = dict(zip(plan.placeholders, args))
        for kind, item in plan.steps:
            if kind == 0:
                ins = item.kernel_inputs(env)
                outs = [torch.empty_strided(s, st, dtype=d) for s, st, d in item.out_specs]
                item.module.call_grad_inputs(*ins, *outs)
                env.update(zip(item.outputs, outs))
                raw = [env[n] for n in item.inputs]  # (weights not packed: for eager)
                seen.setdefault(plan.role, {}).setdefault(item.key, [item, ins, 0, raw])[2] += 1
            elif kind == 1:
                a, kw = torch.fx.node.map_arg((item.args, item.kwargs), env.__getitem__)
                env[item] = item.target(*a, **kw)
            else:
                env[item] = G._attr(item.graph.owning_module, item.target)
        args.clear()
        return torch.fx.node.map_arg(plan.output.args[0], env.__getitem__)

    G._Plan.run = keep
    try:
        fns["tecomp"]()
    finally:
        G._Plan.run = run
    # every plan the step ran (inference; forward and backward), each kernel once
    kernels = {(role, key): v for role, d in seen.items() for key, v in d.items()}

    def tecomp_call(r, ins):
        def f():
            outs = [torch.empty_strided(s, st, dtype=d) for s, st, d in r.out_specs]
            r.module.call_grad_inputs(*ins, *outs)
        return f

    def eager_call(r, ins):
        # the inputs in the layouts PyTorch traced them with (the kernels exchange some
        # row-major), on which its views (after attention's) are legal
        ins = [_traced_layout(n, x) for n, x in zip(r.inputs, ins)]

        def f():
            env = dict(zip(r.inputs, ins))
            for n in r.nodes:
                a, kw = torch.fx.node.map_arg((n.args, n.kwargs), env.__getitem__)
                env[n] = n.target(*a, **kw)
        try:
            with torch.no_grad():
                f()
        except Exception:  # noqa: BLE001  (a node reads a value from outside: not timed)
            return None
        return f

    rows = []
    with torch.no_grad():
        for (role, key), (r, ins, count, raw) in kernels.items():
            calls = {"tecomp": tecomp_call(r, ins), "eager": eager_call(r, raw)}
            m = interleaved_turns({k: f for k, f in calls.items() if f is not None}, rounds,
                                  turn_seconds=0.02)
            cpu = {k: _cpu_min(f, 4 * rounds) for k, f in calls.items() if f is not None}
            rows.append({"graph": role, "ops": G._ops(r.nodes), "count": count,
                         "inputs": [list(x.shape) for x in ins if isinstance(x, torch.Tensor)],
                         "tecomp": m["tecomp"], "eager": m.get("eager"),
                         "tecomp_cpu": cpu["tecomp"], "eager_cpu": cpu.get("eager"),
                         "tecomp_busiest": _busiest_min(calls["tecomp"], 4 * rounds)})
    forward_cpu = _cpu_min(fns["tecomp"], rounds)
    rows.sort(key=lambda row: -row["tecomp"] * row["count"])
    busiest = [r["tecomp_busiest"] for r in rows]
    return {"kernels": rows, "kernel_sum": sum(r["tecomp"] * r["count"] for r in rows),
            "kernel_sum_cpu": sum(r["tecomp_cpu"] * r["count"] for r in rows),
            "kernel_sum_busiest": None if None in busiest else
            sum(b * r["count"] for b, r in zip(busiest, rows)),
            "forward_cpu": forward_cpu, "forward_busiest": _busiest_min(fns["tecomp"], rounds)}


def _traced_layout(node, x):
    """``x`` copied to the strides of ``node``'s traced value, where they differ."""
    import torch

    v = node.meta.get("val")
    if not isinstance(x, torch.Tensor) or not isinstance(v, torch.Tensor) or \
            tuple(v.stride()) == tuple(x.stride()):
        return x
    return torch.empty_strided(tuple(x.shape), tuple(int(e) for e in v.stride()),
                               dtype=x.dtype).copy_(x)


def _cpu_min(fn, calls: int) -> float:
    """The least process CPU time (all threads) of ``calls`` calls of ``fn``: on a
    loaded machine the time the process held no core is not in it (a thread that spins
    waiting is, so it is a fair figure at one thread only)."""
    best = float("inf")
    for _ in range(calls):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def _thread_cpu() -> dict:
    """CPU seconds of each thread of this process (Linux: the per-thread CPU clocks of
    /proc/self/task's threads); {} where they cannot be read."""
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for t in tids:
        try:  # the kernel's clock id of thread t's CPU time (CPUCLOCK_SCHED, per thread)
            out[t] = time.clock_gettime(((~int(t)) << 3) | 6)
        except (OSError, ValueError, AttributeError):
            pass
    return out


def _busiest_min(fn, calls: int):
    """The least CPU time, over ``calls`` calls of ``fn``, of the thread that spent the
    most in the call (None where threads' CPU times cannot be read, and at one thread:
    the process time there)."""
    import torch

    if fn is None or torch.get_num_threads() == 1 or not _thread_cpu():
        return None
    best = float("inf")
    for _ in range(calls):
        a = _thread_cpu()
        fn()
        b = _thread_cpu()
        best = min(best, max(v - a.get(t, 0.0) for t, v in b.items()))
    return best


def _print_profile(p: dict, forward_s: float) -> None:
    print("  per kernel: median wall ms per call, then least CPU ms (process time, all "
          "threads; with more threads, then that of the busiest thread); eager: the same "
          "ATen nodes run by PyTorch", flush=True)
    for r in p["kernels"]:
        busiest = (f", busiest {r['tecomp_busiest'] * 1e3:8.3f}"
                   if r["tecomp_busiest"] is not None else "")
        shapes = " ".join("x".join(str(e) for e in s) for s in r["inputs"][:4])
        if r["eager"] is not None:
            eager = (f"eager {r['eager'] * 1e3:8.3f} ms ({r['eager'] / r['tecomp']:.2f}x), "
                     f"cpu {r['eager_cpu'] * 1e3:8.3f} ms "
                     f"({r['eager_cpu'] / r['tecomp_cpu']:.2f}x)")
        else:
            eager = "eager        -                      -          "
        print(f"  {r['graph'][:3]} {r['count']:3d} x {r['tecomp'] * 1e3:8.3f} ms, cpu "
              f"{r['tecomp_cpu'] * 1e3:8.3f}{busiest} ms  {eager}  {r['ops'][:60]}  [{shapes}]",
              flush=True)
    line = (f"  kernels {p['kernel_sum'] * 1e3:.1f} ms of the step's {forward_s * 1e3:.1f} ms "
            f"(between kernels {(forward_s - p['kernel_sum']) * 1e3:.1f} ms); CPU time: kernels "
            f"{p['kernel_sum_cpu'] * 1e3:.1f} ms of {p['forward_cpu'] * 1e3:.1f} ms")
    if p["kernel_sum_busiest"] is not None and p["forward_busiest"] is not None:
        line += (f"; busiest thread: kernels {p['kernel_sum_busiest'] * 1e3:.1f} ms of "
                 f"{p['forward_busiest'] * 1e3:.1f} ms")
    print(line, flush=True)


def _child(name: str, batch: int, layers: int, rounds: int, profile: bool = False) -> None:
    sys.path.insert(0, HERE)
    sys.path.insert(1, ROOT)
    from common import interleaved_turns

    import torch
    import tecomp.dynamo  # noqa: F401

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    fns, what = _case(name, batch, layers)
    t0 = time.perf_counter()
    fns["tecomp"]()
    compile_s = time.perf_counter() - t0
    out = {"what": what, "tecomp_first_call_s": compile_s, "stats": dict(tecomp.dynamo.STATS)}
    if rounds:
        cpu = os.environ.get("BENCH_TECOMP_CPU") == "1"
        out["medians"] = interleaved_turns(fns, rounds, **(
            {"clock": time.process_time} if cpu else {}))
        if profile:
            out["profile"] = _kernel_profile(fns, rounds)
    print("RESULT " + json.dumps(out), flush=True)


def _run(name, batch, layers, rounds, threads, cache_dir, profile=False,
         other_threads=False, ab="", cpu=False):
    env = dict(os.environ, TECOMP_CACHE_DIR=cache_dir, PYTHONPATH=ROOT,
               BENCH_TECOMP_OTHER_THREADS="1" if other_threads else "0",
               BENCH_TECOMP_AB=ab, BENCH_TECOMP_CPU="1" if cpu else "0")
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                "TECOMP_NUM_THREADS"):
        env[var] = str(threads)
    p = subprocess.run([sys.executable, __file__, "--child", name, str(batch), str(layers),
                        str(rounds)] + (["--profile"] if profile else []),
                       capture_output=True, text=True, env=env)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
    return {"error": f"exit {p.returncode}: {' | '.join(tail)}"}


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
               "--profile" in sys.argv[6:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="bert,cnn-train,bert-layer-train,resnet50")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--profile", action="store_true",
                    help="each tecomp kernel's time against eager's for its nodes")
    ap.add_argument("--other-threads", action="store_true",
                    help="also tecomp with the option threads not its default's, in the "
                         "same turns")
    ap.add_argument("--ab", default="",
                    help="also these variants of the backend in the same turns, "
                         "comma-separated: " + ", ".join(VARIANTS) + " (resnet50*; "
                         "the training steps: " + ", ".join(TRAIN_VARIANTS) + ")")
    ap.add_argument("--cpu", action="store_true",
                    help="medians of the process CPU time per call, not wall time (on a "
                         "loaded machine a fair figure at one thread)")
    args = ap.parse_args()
    bad = [v for v in args.ab.split(",") if v and v not in VARIANTS]
    if bad:
        ap.error(f"--ab: unknown variant(s) {', '.join(bad)}; the variants are "
                 f"{', '.join(VARIANTS)}")
    sys.path.insert(0, HERE)
    sys.path.insert(1, ROOT)
    from workloads import machine

    print(f"# {machine()}", flush=True)
    configs = {"bert": [1, 8], "cnn-train": [32], "bert-layer-train": [8],
               "resnet50": [1, 8], "resnet50-downsample": [1, 8]}
    for name in args.models.split(","):
        for batch in configs[name]:
            with tempfile.TemporaryDirectory(prefix="tecomp-bench-cache-") as cache:
                for k, threads in enumerate(int(t) for t in args.threads.split(",")):
                    if k == 0:  # compile time: cold, then warm (another process)
                        cold = _run(name, batch, args.layers, 0, threads, cache)
                        if "error" in cold:
                            print(f"{name} batch {batch}: {cold['error']}", flush=True)
                            break
                    r = _run(name, batch, args.layers, args.rounds, threads, cache,
                             args.profile, args.other_threads, args.ab, args.cpu)
                    if "error" in r:
                        print(f"{name} batch {batch}, {threads} threads: {r['error']}",
                              flush=True)
                        continue
                    m = r["medians"]
                    line = (f"{r['what']}, {threads} thread{'s' if threads > 1 else ''}"
                            f"{' (process CPU time)' if args.cpu else ''}: "
                            f"eager {m['eager'] * 1e3:.1f} ms, inductor "
                            f"{m['inductor'] * 1e3:.1f} ms, tecomp {m['tecomp'] * 1e3:.1f} ms "
                            f"({m['eager'] / m['tecomp']:.2f}x eager, "
                            f"{m['inductor'] / m['tecomp']:.2f}x inductor)")
                    if OTHER in m:
                        t = m[OTHER]
                        line += (f"; tecomp threads='{_other_threads()}' {t * 1e3:.1f} ms "
                                 f"({m['eager'] / t:.2f}x eager, {m['inductor'] / t:.2f}x "
                                 f"inductor)")
                    for v in (t for t in m if t.startswith("tecomp ")):
                        line += (f"; {v} {m[v] * 1e3:.1f} ms (tecomp {v[7:]} / tecomp: "
                                 f"{m[v] / m['tecomp']:.2f}x)")
                    if k == 0:
                        line += (f"; tecomp first call: cold cache "
                                 f"{cold['tecomp_first_call_s']:.1f} s, warm "
                                 f"{r['tecomp_first_call_s']:.1f} s "
                                 f"(kernels loaded {r['stats']['disk']}, built "
                                 f"{r['stats']['built']})")
                    print(line, flush=True)
                    if "profile" in r:
                        _print_profile(r["profile"], m["tecomp"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
