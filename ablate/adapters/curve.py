"""A run on another trainer, read: where its trainer logs the curve, the study's fit columns,
and the curve as metrics.jsonl-style rows for `ablate.analysis.gather`.

Reading only (no process is started here), so the analysis imports this and not the runner
that trains the run (`runner`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ablate.adapters.study import ForeignConfig, run_dir_config
from ablate.errors import InputError
from ablate.readers import READERS
from ablate.readers.pick import pick
from trainer.rundir import read_status

# Defaults for `fit:` where the study does not say (TRL logs cumulative tokens and, with an
# eval split, the eval reward; other trainers' score names vary, so their study names it).
FIT_DEFAULTS = {"trl": {"x": "num_tokens", "y": "eval_reward"}}


def log_path(cfg: ForeignConfig, run_dir: Path, default_log: str) -> Path:
    """Where the trainer writes its curve: `trainer.log`, else the adapter's place
    (`default_log`). For TRL without the entry's JSONL (your own script), the newest
    checkpoint's trainer_state.json."""
    if cfg.trainer.log:
        return run_dir / cfg.trainer.log
    path = run_dir / default_log
    if cfg.trainer.kind == "trl" and not path.exists():
        states = sorted((run_dir / "trl").glob("checkpoint-*/trainer_state.json"),
                        key=lambda p: int(p.parent.name.rsplit("-", 1)[1]))
        if states:
            return states[-1]
    return path


def fit_defaults(trainer: dict[str, Any], fit: dict[str, Any]) -> dict[str, Any]:
    """A study's `fit:` for another trainer: what it says, else the adapter's defaults; with
    `trainer.step_cost` (no logged compute), x is "compute" = step x step_cost."""
    kind = trainer.get("kind", "ablate")
    out = {**FIT_DEFAULTS.get(kind, {}), **fit}
    if trainer.get("step_cost") is not None and "x" not in fit:
        out["x"] = "compute"
    return out


def curve_rows(run_dir: Path, fit: dict[str, Any], default_log: str) -> bytes:
    """The run's curve as metrics.jsonl-style lines ({x: .., y: ..}) read with the existing
    readers from where its trainer wrote it (`default_log`: the adapter's place, unless
    `trainer.log` says); empty while nothing is logged yet."""
    cfg = run_dir_config(run_dir)
    path = log_path(cfg, run_dir, default_log)
    if not path.exists():
        return b""
    for name, test, reader in READERS:
        if test(path):
            cost = cfg.trainer.step_cost
            x = None if cost is not None and fit.get("x") == "compute" else fit.get("x")
            try:
                got = pick(reader(path), str(path), x=x, y=fit.get("y"), step_cost=cost, kind=name)
            except InputError:
                if read_status(run_dir).get("state") == "done":
                    raise
                return b""  # still running: the score may not be logged yet
            xs, ys = got.frame[got.x].tolist(), got.frame[got.y].tolist()
            x_out = fit.get("x", got.x)
            return b"".join(json.dumps({x_out: a, fit.get("y", got.y): b}).encode() + b"\n"
                            for a, b in zip(xs, ys))
    return b""
