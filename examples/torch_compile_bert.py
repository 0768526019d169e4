"""A BERT encoder through ``torch.compile(model, backend="tecomp")``: no TE written.

The model is transformers' ``BertModel(BertConfig(...))`` (random weights, nothing
downloaded) when transformers is installed, else a BERT encoder written here from
``torch.nn`` modules (post-layer-norm layers: self-attention through
``F.scaled_dot_product_attention``, GELU feed-forward).  The script compiles it, checks
the compiled output against eager PyTorch, times both (interleaved, medians) and prints
which operators ran eagerly (the log of ``tecomp.dynamo``).

    python3 examples/torch_compile_bert.py [--layers 2] [--batch 1] [--seq 128]
                                            [--hidden 768] [--rounds 5] [--hand-written]

BERT-base is ``--layers 12`` (the default here is 2, to compile in seconds).
Needs torch (``pip install torch==2.13.0``); transformers is optional.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import tecomp.dynamo  # noqa: E402,F401  (registers backend="tecomp")


class Layer(torch.nn.Module):
    """One post-layer-norm BERT layer (Hugging Face's BertLayer in eval mode)."""

    def __init__(self, hidden: int, heads: int, ffn: int):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.out = torch.nn.Linear(hidden, hidden)
        self.norm1 = torch.nn.LayerNorm(hidden, eps=1e-12)
        self.up = torch.nn.Linear(hidden, ffn)
        self.down = torch.nn.Linear(ffn, hidden)
        self.norm2 = torch.nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, mask):
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        c = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.norm1(x + self.out(c.transpose(1, 2).reshape(b, s, h)))
        return self.norm2(x + self.down(F.gelu(self.up(x))))


class Encoder(torch.nn.Module):
    """Embeddings (word + position, layer norm) and ``layers`` BERT layers."""

    def __init__(self, layers: int, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                 vocab: int = 30522, max_len: int = 512):
        super().__init__()
        self.words = torch.nn.Embedding(vocab, hidden)
        self.positions = torch.nn.Embedding(max_len, hidden)
        self.norm = torch.nn.LayerNorm(hidden, eps=1e-12)
        self.layers = torch.nn.ModuleList(Layer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, ids):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.norm(self.words(ids) + self.positions(pos))
        mask = torch.zeros(ids.shape[0], 1, 1, ids.shape[1])  # no padding
        for layer in self.layers:
            x = layer(x, mask)
        return x


def _skip_broken_torchvision() -> None:
    """Hide an installed torchvision that cannot be imported (one built for another
    torch: "operator torchvision::nms does not exist"), which transformers would
    otherwise import and fail on, so that ``BertModel`` imports without it."""
    import importlib.util

    if "torchvision" in sys.modules or importlib.util.find_spec("torchvision") is None:
        return
    try:
        import torchvision  # noqa: F401
    except Exception as e:  # noqa: BLE001  (any failure: transformers treats it as absent)
        print(f"torchvision does not import ({type(e).__name__}: {str(e)[:80]}): "
              f"transformers runs without it")
        sys.modules["torchvision"] = None


def build_model(args):
    """(model, what it is): transformers' BertModel if installed, else :class:`Encoder`."""
    if not args.hand_written:
        _skip_broken_torchvision()
        try:
            from transformers import BertConfig, BertModel
        except ImportError:
            print("transformers is not installed: using the hand-written BERT encoder")
        else:
            cfg = BertConfig(num_hidden_layers=args.layers, hidden_size=args.hidden,
                             num_attention_heads=args.hidden // 64,
                             intermediate_size=4 * args.hidden)
            model = BertModel(cfg, add_pooling_layer=False).eval()
            return (lambda ids: model(ids).last_hidden_state), \
                f"transformers BertModel, {args.layers} layers"
    model = Encoder(args.layers, args.hidden, args.hidden // 64, 4 * args.hidden).eval()
    return model, f"hand-written BERT encoder, {args.layers} layers"


def median_ms(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--hand-written", action="store_true",
                    help="the encoder written here even where transformers is installed")
    args = ap.parse_args()
    logging.basicConfig(format="%(message)s")
    logging.getLogger("tecomp.dynamo").setLevel(logging.INFO)

    torch.manual_seed(0)
    model, what = build_model(args)
    ids = torch.randint(0, 30522, (args.batch, args.seq))
    compiled = torch.compile(model, backend="tecomp")
    with torch.no_grad():
        t0 = time.perf_counter()
        y = compiled(ids)
        compile_s = time.perf_counter() - t0
        ref = model(ids)
        err = float((y - ref).abs().max() / ref.abs().max())
        print(f"{what}, batch {args.batch} x {args.seq}: first call (compile) "
              f"{compile_s:.1f} s, kernels {tecomp.dynamo.STATS}")
        print(f"max error relative to eager: {err:.2e}" + ("" if err < 1e-4 else "  MISMATCH"))
        eager_ms, tecomp_ms = [], []
        for _ in range(args.rounds):  # interleaved: each round times both
            eager_ms.append(median_ms(lambda: model(ids), 1))
            tecomp_ms.append(median_ms(lambda: compiled(ids), 1))
    e, t = statistics.median(eager_ms), statistics.median(tecomp_ms)
    print(f"eager {e:.1f} ms, tecomp {t:.1f} ms ({e / t:.2f}x eager)")
    return 0 if err < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
