"""A curve-predictive Optuna pruner: stop a trial whose fitted ceiling cannot beat the best.

Optuna's own pruners (median, successive halving, Hyperband) compare raw intermediate values,
which on RL curves rewards a fast start: a recipe with a low ceiling leads early. This one
compares fitted asymptotes. At each rung the trial's curve so far is fitted (ScaleRL sigmoid,
ablate.analysis.fitters) and the trial stops when the upper end of its A's 95% interval is below the
highest lower end among finished trials: then, by the fit's own uncertainty, it cannot reach
the best ceiling already found. A rung whose curve cannot be fitted stops the trial only when
it collapsed: its score fell from its best by COLLAPSE_DROP to below that lower end (the
collapse rule of adaptive studies, ablate.studies.stage_rules; an LR far too high does this and
never fits). With no finished trial yet, nothing is pruned.

The objective stores intervals as trial user attributes: "rung_A_ci" (latest rung; None when
it could not be fitted, then "rung_fell" holds [best, recent] score) and "A_ci" (the finished
trial's full fit); see ablate.studies.tune.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import optuna

from ablate.studies.stage_rules import collapsed


def should_stop(a_hi: float, finished_lo: Iterable[float]) -> float | None:
    """The lower bound that dominates `a_hi` (the reason to stop), or None to go on."""
    best = max(finished_lo, default=None)
    return best if best is not None and a_hi < best else None


def rung_stops(ci: Sequence[float] | None, fell: Sequence[float] | None,
               finished_lo: list[float]) -> bool:
    """The rule at one rung: `ci` is the rung's A interval (None when it could not be fitted),
    `fell` its [best, recent] score (the collapse rule's evidence when there is no fit)."""
    if ci:
        return should_stop(float(ci[1]), finished_lo) is not None
    bound = max(finished_lo, default=None)  # what a finished trial surely reaches
    if fell and bound is not None:  # no fit: only a collapse below it stops the trial
        return collapsed(fell, bound)
    return False  # this rung could not be fitted: no evidence to stop on


class CurvePruner(optuna.pruners.BasePruner):
    """Prune a trial once its fitted A's upper bound is below the best finished trial's A
    lower bound (see the module docstring)."""

    def prune(self, study: optuna.study.Study, trial: optuna.trial.FrozenTrial) -> bool:
        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        lows = [t.user_attrs["A_ci"][0] for t in done if t.user_attrs.get("A_ci")]
        return rung_stops(trial.user_attrs.get("rung_A_ci"), trial.user_attrs.get("rung_fell"),
                          lows)
