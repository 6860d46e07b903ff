"""The shape every reader returns, and run-name helpers they share."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

# The forecast band `ablate watch` draws beside a run's score in its trackers
# (ablate/analysis/watch_trackers.py): `<score>_forecast_lo`, `_median`, `_hi`. A reader of
# those logs never takes one of them for a score or a compute of their own.
BAND = ("lo", "median", "hi")


def band_names(y: str) -> tuple[str, ...]:
    """The band's three series beside score `y`."""
    return tuple(f"{y}_forecast_{b}" for b in BAND)


def is_band(name: str) -> bool:
    return any(name.endswith(f"_forecast_{b}") for b in BAND)


# "cispo/seed1", "cispo-seed1", "cispo_seed_1", "cispo seed1" -> ("cispo", 1)
_SEED = re.compile(r"^(?:(.*?)[/_\- .]+)?seed[_\-]?(\d+)$", re.IGNORECASE)


@dataclass
class Wide:
    """One row per (run, step); columns "run", "step" and one per metric (NaN where a metric
    was not logged at that step)."""

    frame: pd.DataFrame
    step_name: str = "step"  # what the tool calls its x axis (W&B: the CSV's first column)
    run_column: str = "run"  # what the file calls the column naming its runs (--by takes it)


def split_seed(run: str, fallback: str) -> tuple[str, int]:
    """A run name -> (variant, seed): a trailing "seed<N>" part is the seed."""
    m = _SEED.match(run)
    if not m:
        return run, 0
    return (m.group(1) or fallback), int(m.group(2))


def wide_from_long(rows: pd.DataFrame) -> pd.DataFrame:
    """Long rows (run, step, key, value) -> Wide.frame; a step logged twice keeps its last
    value (a resumed run re-logs the steps after its checkpoint)."""
    if rows.empty:
        return pd.DataFrame(columns=["run", "step"])
    w = rows.pivot_table(index=["run", "step"], columns="key", values="value", aggfunc="last")
    w.columns.name = None
    return w.reset_index()
