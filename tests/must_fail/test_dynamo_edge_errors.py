"""Mistakes with torch.compile(backend="tecomp") that eager PyTorch refuses at run time
and a kernel would have answered silently: each a TecompError subclass naming the
operator and the fix."""
import pytest

torch = pytest.importorskip("torch")

import tecomp.dynamo  # noqa: E402,F401  (registers the backend)
from tecomp.errors import BoundsError  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_embedding_id_past_the_table():
    """An id >= num_embeddings: tc.nn.embedding gave its row zeros."""
    table = torch.nn.Embedding(5, 3)
    f = torch.compile(lambda ids: table(ids) * 2, backend="tecomp", options={"cache": False})
    with torch.no_grad(), pytest.raises(
            BoundsError, match=r"embedding \(aten.embedding of a table of 5 rows\) is given id "
                               r"5, outside \[0, 5\), in its ids of shape \[3\].*pass ids below "
                               r"the table's num_embeddings"):
        f(torch.tensor([0, 5, 2]))


def test_embedding_negative_id_of_a_view():
    """A negative id in the part of the ids an embedding reads (a slice of them)."""
    w = torch.randn(5, 3)
    f = torch.compile(lambda ids: torch.nn.functional.embedding(ids[:, 1:], w),
                      backend="tecomp", options={"cache": False})
    with pytest.raises(BoundsError, match=r"is given id -1, outside \[0, 5\), in its ids of "
                                          r"shape \[2, 2\]"):
        f(torch.tensor([[-7, 1, 2], [0, -1, 4]]))
