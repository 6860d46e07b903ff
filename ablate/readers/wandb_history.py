"""W&B run history export: long, one row per logged step of each run.

What a project's runs table or `wandb.Api().run(...).history()` exports as CSV: a step column
(`Step`, `_step`), a run column (`run_name`, `Name`, ...: names such as `cispo-seed0`, whose
seed `ablate.readers.common.split_seed` reads), clock columns (`_runtime`, `_timestamp`: never a
compute), and one column per metric, blank on the rows where that metric was not logged (eval
every N steps, train every step). `ablate.readers.pick` then chooses score and compute as for
every other log (issue 41: this shape read as a plain table and asked for 'compute' and 'score').
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ablate.errors import InputError
from ablate.readers.common import Wide, wide_from_long
from ablate.readers.wandb_csv import _header  # one way to read a CSV's header

RUN_COLUMNS = ("run_name", "Name", "name", "run", "display_name", "run_id")
STEP_COLUMNS = ("Step", "_step", "step", "global_step", "trainer/global_step",
                "train/global_step")
CLOCK = ("_runtime", "_timestamp", "_wandb.runtime")
TABLE = {"variant", "compute", "score"}  # ablate's own long table: read as a table
# W&B's own marks: its system columns (`_step`, `_runtime`, `_timestamp`, any `_x`) or the
# UI's `Step`. A CSV of `run,step,...` without one is anyone's table (issue 51: a plain CSV was
# announced as a "W&B history export" and its columns renamed under --by).
MARKS = ("Step",)


def is_wandb_history(path: Path) -> bool:
    if not (path.is_file() and path.suffix == ".csv"):
        return False
    cols = _header(path)
    wandb = any(c in MARKS or c.startswith("_") for c in cols)
    return (wandb and any(c in cols for c in RUN_COLUMNS) and any(c in cols for c in STEP_COLUMNS)
            and not TABLE & set(cols) and not any(" - " in c for c in cols))


def read_wandb_history(path: Path) -> Wide:
    try:
        df = pd.read_csv(path)
    except Exception as e:  # noqa: BLE001
        raise InputError(f"{path}: cannot read as CSV ({str(e).splitlines()[0]})") from None
    run = next(c for c in RUN_COLUMNS if c in df.columns)
    step = next(c for c in STEP_COLUMNS if c in df.columns)
    metrics = [c for c in df.columns if c not in (run, step, *CLOCK, *RUN_COLUMNS)
               and not c.startswith("_") and pd.to_numeric(df[c], errors="coerce").notna().any()]
    if not metrics:
        raise InputError(f"{path}: W&B history export has no numeric metric columns")
    long = df.melt(id_vars=[run, step], value_vars=metrics, var_name="key", value_name="value")
    long["value"] = pd.to_numeric(long["value"], errors="coerce")
    long["step"] = pd.to_numeric(long[step], errors="coerce")
    long = long.dropna(subset=["value", "step"]).rename(columns={run: "run"})
    long["run"] = long["run"].astype(str)
    return Wide(wide_from_long(long[["run", "step", "key", "value"]]), step_name=step,
                run_column=run)
