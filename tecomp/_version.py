"""tecomp's version (one place: ``tecomp.__version__`` and the libraries it exports)."""
__version__ = "0.1.0"
