"""Fit every variant of a set of curves; a failed variant is kept with its reason, never dropped."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ablate.analysis import fit_trust
from ablate.analysis.fit import N_BOOT, Fit, FitError
from ablate.analysis.fitters import fit_sigmoid
from ablate.analysis.sag import Fall
from ablate.analysis.sources import Curves


FELL = "fell from its peak"  # the verdict of a variant whose runs peaked and fell


def fall_text(falls: list[tuple[int, Fall]]) -> str:
    """"seed 1 fell 0.10 from its peak: ..." for each run that fell."""
    return "; ".join(f"seed {s} {f.text()}" for s, f in falls)


@dataclass
class GroupFit:
    variant: str
    fit: Fit | None
    error: str | None
    n_points: int  # points in the variant's data (all seeds, before the window)
    method: str = "default"
    cause: str = "no fit"  # why there is no fit (FitError.cause), for the verdict
    # its runs that fell from their peak (ablate.analysis.sag, the rule `watch` holds runs to):
    # [(seed, Fall)]; set by the pipeline from every evaluation of each run
    falls: list[tuple[int, Fall]] = field(default_factory=list)

    def fit_verdict(self) -> tuple[str, str]:
        """(verdict, reason): can this fit be trusted, and why (ablate.analysis.fit_trust)."""
        if self.fit is None:
            return fit_trust.refused(self.cause, self.error or "")
        v, why, _ = fit_trust.assess(self.fit)
        return v, why

    def verdict(self) -> tuple[str, str]:
        """The fit's verdict, except that a fit judged ok whose runs peaked and fell reads
        FELL (a sigmoid cannot fall: its A sits between the peak and the end). A fit judged
        otherwise keeps its label (the answer reads "pinned" from it) and names the fall in its
        reason."""
        v, why = self.fit_verdict()
        if not self.falls:
            return v, why
        fell = fall_text(self.falls)
        if v == fit_trust.OK:
            return FELL, f"{fell}; a sigmoid cannot fall, so A reads the curve between its " \
                         f"peak and its end; the fit: {why}"
        return v, f"{why}; {fell}"

    def as_dict(self) -> dict:
        v, why = self.verdict()
        return {**self._fields(), "verdict": v, "verdict_reason": why,
                "fell": [{"seed": s, **f.as_json()} for s, f in self.falls]}

    def _fields(self) -> dict:
        if self.fit is None:
            return {"variant": self.variant, "A": None, "B": None, "C_mid": None, "R0": None,
                    "A_ci": None, "B_ci": None, "C_mid_ci": None, "r2": None,
                    "n_points": 0, "window": None, "window_rule": None, "skipped": None,
                    "method": self.method, "warnings": [], "error": self.error}
        return {"variant": self.variant, **self.fit.as_dict()}


def fit_groups(curves: Curves, *, min_compute: float | None = None,
               max_compute: float | None = None, method: str = "default",
               n_boot: int = N_BOOT, intervals: bool = True,
               paper_grid: str = "relative", bins: int | None = None) -> list[GroupFit]:
    """One fit per variant (its seeds pooled), window defaults taken from the source.

    A variant whose fit fails, for a reason in the data (FitError) or a numerical breakdown
    (LinAlgError), is a row with that reason: one bad variant never takes the others down.
    """
    lo = min_compute if min_compute is not None else curves.defaults.get("min_compute")
    hi = max_compute if max_compute is not None else curves.defaults.get("max_compute")
    out = []
    for name, g in curves.frame.groupby("variant", sort=False):
        try:
            fit = fit_sigmoid(g["compute"].to_numpy(), g["score"].to_numpy(), min_compute=lo,
                              max_compute=hi, method=method, seeds=g["seed"].to_numpy(),
                              n_boot=n_boot, intervals=intervals, paper_grid=paper_grid,
                              bins=bins)
            out.append(GroupFit(str(name), fit, None, len(g), method))
        except FitError as e:
            out.append(GroupFit(str(name), None, f"variant {name!r}: {e}", len(g), method,
                                e.cause))
        except np.linalg.LinAlgError as e:
            out.append(GroupFit(str(name), None, f"variant {name!r}: numerical failure in the "
                                f"{method} fit ({e}); try --method default", len(g), method))
    return out
