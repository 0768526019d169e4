"""``python -m tecomp``: see :mod:`tecomp.cli`."""
import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
