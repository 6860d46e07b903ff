"""Rank `ablate tune`'s finished trials on one fit window, as `ablate compare` ranks variants.

During the search each trial is fitted alone when it finishes (the sampler and the pruner need
a number then), so each gets the start its own curve's shape picks. Trials compared with each
other must be fitted on one span (ablate.analysis.pipeline: a curve whose early points are
skipped and one whose are kept read different A and B from the same data). So once the search
has run, every finished trial is refitted through the pipeline's own window rule and fitting
(`common_window`, `fit_all`), and the reported values and the best trial come from those fits.
The search's own per-trial value stays in the output as `search_value`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import pandas as pd

from trainer import rundir


def _label(trial: dict[str, Any]) -> str:
    return f"trial {trial['number']}"


def _curves(trials: list[dict[str, Any]], x: str, y: str, source: str):
    """(the trials' (compute, score) points as one set of curves, a variant per trial; why a
    trial has none). A damaged metrics file is that trial's problem, not the ranking's."""
    from ablate.analysis.sources import Curves

    rows, errors = [], {}
    for t in trials:
        try:
            got = rundir.read_metrics(Path(t["run_dir"]))
        except rundir.MetricsError as e:
            errors[_label(t)] = str(e)
            continue
        rows += [{"variant": _label(t), "seed": 0, "compute": float(r[x]), "score": float(r[y])}
                 for r in got if r.get(x) is not None and r.get(y) is not None]
    frame = pd.DataFrame(rows, columns=["variant", "seed", "compute", "score"])
    return Curves(frame, source, x, y), errors


def _value(fit, obj) -> tuple[float, Optional[list[float]]]:
    """(objective value, predicted_ci) of a fit: its A, or its score at `obj.at`."""
    if obj.reduce == "asymptote":
        return float(fit.A), None
    return float(fit.predict(obj.at)), list(fit.predict_interval(obj.at))


def rank_on_shared_window(trials: list[dict[str, Any]], obj, source: str,
                          n_boot: int = 400) -> tuple[Optional[dict[str, Any]], Optional[dict]]:
    """Refit the COMPLETE trials (dicts of `tune`'s output, updated in place) on one window;
    returns (best trial, the window as `compare --json` states it). A trial whose curve
    cannot be fitted on the shared window keeps no value and says why (`error`)."""
    from ablate.analysis.pipeline import Options, common_window, fit_all

    done = [t for t in trials if t["state"] == "COMPLETE" and t.get("run_dir")]
    if not done:
        return None, None
    curves, errors = _curves(done, obj.x, obj.metric, source)
    options = Options(x=obj.x, y=obj.metric, min_compute=obj.min_compute, n_boot=n_boot)
    window = common_window(curves, options)
    fits = {g.variant: g for g in fit_all(curves, options, window)}
    for t in done:
        t["search_value"] = t["value"]
        g = fits.get(_label(t))
        if g is None or g.fit is None:
            t.update(value=None, A_ci=None, predicted_ci=None,
                     error=g.error if g is not None else errors.get(
                         _label(t), f"no '{obj.metric}' with '{obj.x}' points"))
            continue
        t["value"], t["predicted_ci"] = _value(g.fit, obj)
        t["A_ci"] = list(g.fit.ci.get("A", (g.fit.A, g.fit.A)))
    valued = [t for t in done if t["value"] is not None]
    best = max(valued, key=lambda t: t["value"]) if valued else None
    return best, window.to_json()
