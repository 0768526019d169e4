"""torch.compile(backend="tecomp") of a graph with a symbolic batch (mark_dynamic): the
kernels built once with symbolic extents (option dynamic=True, the default) against
kernels built per size (dynamic=False), on a 2-layer MLP (symbolic batch) or a
BERT-tiny encoder layer (hidden 128, 2 heads, batch 1, symbolic sequence length),
interleaved in one process.

    PYTHONPATH=. python benchmarks/dynamic_shapes.py [--model mlp|bert] [--sizes 8,64,256]

Prints per size the median per-call time of each and their ratio, the first call's time
(building included), and the builds each made (tecomp.dynamo.STATS)."""
import argparse
import statistics
import time

import torch

import tecomp.dynamo as td
from tecomp.dynamo import cache as dcache


class _Bert(torch.nn.Module):
    """A BERT-tiny encoder layer (hidden 128, 2 heads, FFN 512), as HuggingFace's."""

    def __init__(self, d=128, h=2):
        super().__init__()
        self.h = h
        self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.f1, self.f2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(b, n, self.h, d // self.h).transpose(1, 2) for t in (q, k, v))
        a = torch.softmax(q @ k.transpose(-1, -2) * (d // self.h) ** -0.5, dim=-1) @ v
        x = self.ln1(x + self.o(a.transpose(1, 2).reshape(b, n, d)))
        return self.ln2(x + self.f2(torch.nn.functional.gelu(self.f1(x))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp", choices=("mlp", "bert"))
    ap.add_argument("--sizes", default="8,64,256")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=50)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    torch.manual_seed(0)
    if a.model == "mlp":
        mlp = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                  torch.nn.Linear(1024, 256)).eval()
        make, dim = (lambda n: torch.randn(n, 256)), 0
    else:
        mlp = _Bert().eval()
        make, dim = (lambda n: torch.randn(1, n, 128)), 1
    dcache.clear_memory()
    compiled, builds, first = {}, {}, {}
    for dyn in (True, False):
        torch._dynamo.reset()
        c = torch.compile(mlp, backend="tecomp", options={"cache": False, "dynamic": dyn})
        b0 = td.STATS["built"]
        for n in sizes:
            x = make(n)
            torch._dynamo.mark_dynamic(x, dim)
            t = time.perf_counter()
            with torch.no_grad():
                y = c(x)
            first[dyn, n] = time.perf_counter() - t
            torch.testing.assert_close(y, mlp(x), rtol=1e-3, atol=1e-4)
        builds[dyn] = td.STATS["built"] - b0
        compiled[dyn] = c
    xs = {n: make(n) for n in sizes}
    for x in xs.values():
        torch._dynamo.mark_dynamic(x, dim)
    times = {(d, n): [] for d in (True, False) for n in sizes}
    with torch.no_grad():
        for _ in range(a.rounds):
            for n in sizes:
                for d in (True, False):
                    c, x = compiled[d], xs[n]
                    t = time.perf_counter()
                    for _ in range(a.calls):
                        c(x)
                    times[d, n].append((time.perf_counter() - t) / a.calls)
    print(f"{a.model}, threads {torch.get_num_threads()}; builds: symbolic {builds[True]}, "
          f"per size {builds[False]}")
    for n in sizes:
        s, p = statistics.median(times[True, n]), statistics.median(times[False, n])
        print(f"batch {n:4d}: symbolic {s * 1e6:8.1f} us  per-size {p * 1e6:8.1f} us  "
              f"ratio {s / p:.2f}   first call {first[True, n]:.2f} s / {first[False, n]:.2f} s")


if __name__ == "__main__":
    main()
