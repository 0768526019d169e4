"""Testing tools for tecomp: random programs and schedules, the differential runner,
pass-by-pass checking and the long-run fuzzer (the bad inputs are the must-fail tests,
``tests/must_fail/``).

* :func:`check_passes` ``(s, args)``: lower while running the reference interpreter before
  and after every lowering pass; raises :class:`PassCheckError` naming the first pass that
  changes a result, with both IRs.
* :func:`run_case` / :func:`draw_case`: differential fuzzing (LLVM build or CUDA emulation
  vs the interpreter vs numpy); ``python -m tecomp.testing.fuzz --cases N`` is the long run.
"""
from .pass_check import PassCheckError, check_func_passes, check_passes, make_args
from .diff import Case, Outcome, draw_case, run_case
from .draw import HypothesisDraw, RandomDraw

__all__ = ["PassCheckError", "check_passes", "check_func_passes", "make_args", "Case", "Outcome",
           "draw_case", "run_case", "HypothesisDraw", "RandomDraw"]
