"""W&B chart CSV export: wide, one column per run.

A line chart's "Export -> CSV" writes its x axis first ("Step", or the custom x such as
"trainer/global_step"), then for every run "<run name> - <metric>" plus "<...>__MIN" and
"<...>__MAX" (the band W&B draws when it samples points; equal to the value for raw points).
Runs without a point at a step leave the cell empty. Grouped charts write "Group: <name> -
<metric>" instead of a run name.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ablate.errors import InputError
from ablate.readers.common import Wide, wide_from_long

SEP = " - "


def _header(path: Path) -> list[str]:
    try:
        return list(pd.read_csv(path, nrows=0).columns)
    except Exception:  # noqa: BLE001 - any parse error means "not this format"
        return []


def is_wandb_csv(path: Path) -> bool:
    if not (path.is_file() and path.suffix == ".csv"):
        return False
    cols = _header(path)
    return len(cols) >= 2 and SEP not in cols[0] and all(SEP in c for c in cols[1:]) \
        and "variant" not in cols


def read_wandb_csv(path: Path) -> Wide:
    try:
        df = pd.read_csv(path)
    except Exception as e:  # noqa: BLE001
        raise InputError(f"{path}: cannot read as CSV ({str(e).splitlines()[0]})") from None
    step = df.columns[0]
    parts = []
    for col in df.columns[1:]:
        if col.endswith("__MIN") or col.endswith("__MAX"):
            continue
        run, _, metric = col.rpartition(SEP)
        run = run.removeprefix("Group: ")
        v = pd.to_numeric(df[col], errors="coerce")
        bad = v.isna() & df[col].notna()
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise InputError(f"{path}: column {col!r} line {i + 2} is not a number "
                             f"({df[col].iloc[i]!r})")
        parts.append(pd.DataFrame({"run": run, "step": pd.to_numeric(df[step], errors="coerce"),
                                   "key": metric, "value": v}).dropna(subset=["value", "step"]))
    if not parts:
        raise InputError(f"{path}: W&B export has no '<run> - <metric>' columns")
    return Wide(wide_from_long(pd.concat(parts, ignore_index=True)), step_name=step)
