"""Fit every variant of a set of curves; a failed variant is kept with its reason, never dropped."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ablate.analysis import fit_trust
from ablate.analysis.fit import N_BOOT, Fit, FitError
from ablate.analysis.fitters import fit_sigmoid
from ablate.analysis.sources import Curves


@dataclass
class GroupFit:
    variant: str
    fit: Fit | None
    error: str | None
    n_points: int  # points in the variant's data (all seeds, before the window)
    method: str = "default"
    cause: str = "no fit"  # why there is no fit (FitError.cause), for the verdict

    def verdict(self) -> tuple[str, str]:
        """(verdict, reason): can this fit be trusted, and why (ablate.analysis.fit_trust)."""
        if self.fit is None:
            return fit_trust.refused(self.cause, self.error or "")
        v, why, _ = fit_trust.assess(self.fit)
        return v, why

    def as_dict(self) -> dict:
        v, why = self.verdict()
        return {**self._fields(), "verdict": v, "verdict_reason": why}

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
