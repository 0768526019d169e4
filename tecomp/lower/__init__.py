from .pipeline import PASSES, lower, run_passes
