"""The strategy layer: how each operator is scheduled on each kind of target.

It sits between the target-free compute definitions (:mod:`tecomp.nn`, with their
gradients from :mod:`tecomp.autodiff`) and the search (:mod:`tecomp.autoschedule`), and
holds every scheduling decision tecomp makes without measuring, read from the target's
machine model (:attr:`tecomp.Target.machine`):

=====================  ===================================================================
:mod:`.cpu`            CPU templates, one module per operator (TVM's ``topi.x86``), and
                       :func:`apply_rules`: a template where one fits, else the rules
:mod:`.cuda`           CUDA templates (TVM's ``topi.cuda``)
:mod:`.rules`          the generic CPU rules: a schedule for any compute DAG, every decision
                       a knob (:class:`Knobs`) the search can change
:mod:`.cuda_rules`     the generic GPU rules
:mod:`.rows`           row reductions computed at their readers' rows (softmax, norms)
:mod:`.trivial`        the trivial schedule (outer axes parallel, the innermost vectorized),
                       the floor the rules are measured against
:mod:`.tensorize`      int8 GEMMs on the target's dot-product instructions
:mod:`.backward`       :func:`schedule_backward`, a default CPU schedule for gradients
=====================  ===================================================================

``tc.auto_schedule(args, trials=0)`` is :func:`apply_rules` (CPU) or the GPU rules with
every knob at its default; with trials, the search samples the same knobs.
"""
from .backward import schedule_backward
from .cpu import apply_rules
from .rules import Knobs, generic_rules, schedule_stages

__all__ = ["apply_rules", "generic_rules", "schedule_stages", "schedule_backward", "Knobs"]
