"""TensorBoard event files (verl's `tensorboard_log/<project>/<experiment>`, HF/TRL's
`<output_dir>/runs/<date_host>`, ours `tensorboard/<variant>/seed<N>`), read with tbparse.

Each folder holding event files is one run, named by its path below SOURCE (SOURCE's own name
when the events sit directly in it); HF's trailing "runs/<date_host>" is dropped from the name
when something is left. All scalar tags are kept, at their logged steps.
"""

from __future__ import annotations

import re

from pathlib import Path

import pandas as pd

from ablate.errors import InputError
from ablate.readers.common import Wide, wide_from_long


def has_events(path: Path) -> bool:
    return path.is_dir() and any(path.rglob("events.out.tfevents.*"))


def read_tensorboard(path: Path) -> Wide:
    from tbparse import SummaryReader

    df = SummaryReader(str(path), extra_columns={"dir_name"}).scalars
    if df.empty:
        raise InputError(f"{path}: TensorBoard logs contain no scalars")
    run = df["dir_name"].fillna("").astype(str).map(_run_name).replace("", path.resolve().name)
    long = pd.DataFrame({"run": run, "step": df["step"].astype(float), "key": df["tag"],
                         "value": df["value"].astype(float)})
    return Wide(wide_from_long(long))


def _run_name(dir_name: str) -> str:
    """HF Trainer logs to <output_dir>/runs/<date_host>: the run is <output_dir>."""
    short = re.sub(r"(?:^|/)runs/[^/]+$", "", dir_name)
    return short or dir_name
