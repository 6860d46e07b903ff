"""The shape every reader returns, and run-name helpers they share."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

# "cispo/seed1", "cispo-seed1", "cispo_seed_1", "cispo seed1" -> ("cispo", 1)
_SEED = re.compile(r"^(?:(.*?)[/_\- .]+)?seed[_\-]?(\d+)$", re.IGNORECASE)


@dataclass
class Wide:
    """One row per (run, step); columns "run", "step" and one per metric (NaN where a metric
    was not logged at that step)."""

    frame: pd.DataFrame
    step_name: str = "step"  # what the tool calls its x axis (W&B: the CSV's first column)


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
