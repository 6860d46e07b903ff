"""A curve-predictive Optuna pruner: stop a trial whose fitted ceiling cannot beat the best.

Optuna's own pruners (median, successive halving, Hyperband) compare raw intermediate values,
which on RL curves rewards a fast start: a recipe with a low ceiling leads early. This one
compares fitted asymptotes. At each rung the trial's curve so far is fitted (ScaleRL sigmoid,
ablate.analysis.fitters) and the trial stops when the upper end of its A's 95% interval is below the
highest lower end among finished trials: then, by the fit's own uncertainty, it cannot reach
the best ceiling already found. With no finished trial yet, nothing is pruned.

The objective stores intervals as trial user attributes: "rung_A_ci" (latest rung) and "A_ci"
(the finished trial's full fit); see ablate.studies.tune.
"""

from __future__ import annotations

from typing import Iterable, Optional

import optuna


def should_stop(a_hi: float, finished_lo: Iterable[float]) -> Optional[float]:
    """The lower bound that dominates `a_hi` (the reason to stop), or None to go on."""
    best = max(finished_lo, default=None)
    return best if best is not None and a_hi < best else None


class CurvePruner(optuna.pruners.BasePruner):
    """Prune a trial once its fitted A's upper bound is below the best finished trial's A
    lower bound (see the module docstring)."""

    def prune(self, study: "optuna.study.Study", trial: "optuna.trial.FrozenTrial") -> bool:
        ci = trial.user_attrs.get("rung_A_ci")
        if not ci:
            return False  # this rung could not be fitted: no evidence to stop on
        done = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        lows = [t.user_attrs["A_ci"][0] for t in done if t.user_attrs.get("A_ci")]
        return should_stop(float(ci[1]), lows) is not None
