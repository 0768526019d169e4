"""Sources of random choices for the generators.

The generators only call ``int(lo, hi)``, ``choice(seq)`` and ``bool(p)``.  The hypothesis
source turns each call into a draw (so hypothesis can shrink a failing case: every
choice shrinks toward its *first* option, ``bool`` toward False, ``int`` toward ``lo``);
the ``random`` source is for the long-run fuzzer, where a case is named by its seed.
"""
from __future__ import annotations

import random as _random


class RandomDraw:
    """Random choices from ``random.Random(seed)``, for the long-run fuzzer (a case is named
    by its seed).

    Parameters
    ----------
    seed : int
        The seed.
    """

    def __init__(self, seed):
        self.r = _random.Random(seed)

    def int(self, lo: int, hi: int) -> int:
        return self.r.randint(lo, hi)

    def choice(self, seq):
        seq = list(seq)
        return seq[self.r.randrange(len(seq))]

    def bool(self, p: float = 0.5) -> bool:
        return self.r.random() < p

    def sample(self, seq, k: int):
        seq = list(seq)
        return self.r.sample(seq, k)


class HypothesisDraw:
    """Random choices drawn from hypothesis, so that it can shrink a failing case (every
    choice shrinks toward its first option, ``bool`` toward False, ``int`` toward
    ``lo``).

    Parameters
    ----------
    data : hypothesis.strategies.DataObject
        From ``@given(st.data())``.
    """

    def __init__(self, data):
        self.data = data

    def int(self, lo: int, hi: int) -> int:
        from hypothesis import strategies as st

        return self.data.draw(st.integers(lo, hi))

    def choice(self, seq):
        from hypothesis import strategies as st

        seq = list(seq)
        return seq[self.data.draw(st.integers(0, len(seq) - 1))]

    def bool(self, p: float = 0.5) -> bool:
        from hypothesis import strategies as st

        # shrinks toward 0 -> False
        return self.data.draw(st.integers(0, 999)) >= int(round((1.0 - p) * 1000))

    def sample(self, seq, k: int):
        seq = list(seq)
        out = []
        for _ in range(k):
            x = self.choice(seq)
            seq.remove(x)
            out.append(x)
        return out
