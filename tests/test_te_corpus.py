"""The plain-TE corpus (``tecomp.testing.te_corpus``): every operator right under the
default schedule (``tc.auto_schedule``, trials=0) and under the trivial one
(``tecomp.strategy.trivial``), against numpy.  Speed is in ``benchmarks/te_corpus.py``,
not here."""
import numpy as np
import pytest

import tecomp as tc
from tecomp.strategy.trivial import trivial_schedule
from tecomp.testing import te_corpus


def _run(c, s):
    f = tc.build(s, c.args)
    o = c.empty_output()
    f(*c.inputs, o)
    return o


@pytest.mark.parametrize("name", te_corpus.names())
@pytest.mark.parametrize("kind", ["default", "trivial"])
def test_corpus_against_numpy(name, kind):
    if "bfloat16" in name:
        pytest.importorskip("ml_dtypes")
    c = te_corpus.make(name)
    s = tc.auto_schedule(c.args) if kind == "default" else trivial_schedule(c.args)
    o = _run(c, s)
    np.testing.assert_allclose(o.astype(np.float64), c.want, rtol=c.rtol, atol=c.atol)


def test_corpus_is_the_size_the_brief_asks():
    assert 25 <= len(te_corpus.names()) <= 45
