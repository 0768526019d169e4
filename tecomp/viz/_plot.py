"""matplotlib, imported where a picture is drawn (an optional dependency)."""
from __future__ import annotations

import os

from ..errors import ArgumentError, RuntimeUnavailableError
from ..runtime.libfiles import special_file

#: the formats a picture is written in, by the path's suffix
FORMATS = ("png", "svg", "pdf")


def pyplot(what: str):
    """``matplotlib.pyplot`` on the Agg backend (no display needed), or a
    :class:`RuntimeUnavailableError` that says how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeUnavailableError(
            f"{what} draws with matplotlib, which is not installed: pip install matplotlib "
            f"(or pip install 'tecomp[bench]')") from None
    return plt


def image_format(path, what: str, allowed=FORMATS) -> str:
    """The format of ``path`` from its suffix (one of ``allowed``), or an
    :class:`ArgumentError` naming the path; one too for a directory, and for a device,
    a FIFO or a socket (or a link to one): writing a FIFO blocks until someone reads
    it, and a picture written onto a device is lost or worse."""
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentError(f"{what}: path must be a file name (str or os.PathLike), "
                            f"got {type(path).__name__}")
    ext = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    if ext not in allowed:
        raise ArgumentError(f"{what}: cannot tell the format of {os.fspath(path)!r:.200} from its "
                            f"suffix; end the name with one of "
                            f"{', '.join('.' + a for a in allowed)}")
    p = os.fspath(path)
    why = "is a directory" if os.path.isdir(p) else special_file(p)
    if why:
        raise ArgumentError(f"{what}: {p!r:.200} {why}; give the path of a file to write, "
                            f"e.g. {os.path.join(os.path.dirname(p) or '.', 'picture.' + ext)!r:.220}")
    return ext


def text(s: str) -> str:
    """``s`` as matplotlib draws it literally: a ``$`` would start math mode."""
    return str(s).replace("\\", "\\\\").replace("$", r"\$")
