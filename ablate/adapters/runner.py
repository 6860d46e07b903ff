"""Run one variant on another trainer, follow its log, and read its curve for `compare`.

The job (ablate/studies/launch/job.py) calls `run_foreign` for a run dir whose config.yaml
names a trainer. The trainer runs as a child process (its output in `<run_dir>/trainer.log`);
while it runs, the last step of its log is copied into status.json every few seconds, so
`ablate status` shows the step from the trainer's own log.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Optional

from ablate.adapters import adapter_for
from ablate.adapters.study import ForeignConfig, run_dir_config
from ablate.errors import InputError
from trainer.rundir import read_status, write_status

POLL_S = 2.0
# Defaults for `fit:` where the study does not say (TRL logs cumulative tokens and, with an
# eval split, the eval reward; other trainers' score names vary, so their study names it).
FIT_DEFAULTS = {"trl": {"x": "num_tokens", "y": "eval_reward"}}


def log_path(cfg: ForeignConfig, run_dir: Path) -> Path:
    """Where the trainer writes its curve: `trainer.log`, else the adapter's place. For TRL
    without the entry's JSONL (your own script), the newest checkpoint's trainer_state.json."""
    if cfg.trainer.log:
        return run_dir / cfg.trainer.log
    path = run_dir / adapter_for(cfg.trainer).default_log
    if cfg.trainer.kind == "trl" and not path.exists():
        states = sorted((run_dir / "trl").glob("checkpoint-*/trainer_state.json"),
                        key=lambda p: int(p.parent.name.rsplit("-", 1)[1]))
        if states:
            return states[-1]
    return path


def _resume(cfg: ForeignConfig, run_dir: Path) -> bool:
    """A retry resumes through the trainer's own checkpoint: TRL only once one exists (TRL
    refuses `resume_from_checkpoint` without one); others once an attempt has started."""
    if cfg.trainer.kind == "trl":
        return any((run_dir / "trl").glob("checkpoint-*"))
    return (run_dir / ".attempted").exists()


def last_logged_step(path: Path) -> Optional[int]:
    """The last "step" of a JSONL log (read from its tail), else None."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 8192))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def run_foreign(raw: dict[str, Any], run_dir: Path) -> None:
    """Train one run dir with its trainer; raise when the trainer exits non-zero."""
    cfg = ForeignConfig.model_validate(raw)
    adapter = adapter_for(cfg.trainer)
    argv = adapter.argv(cfg.overrides, cfg.seed, run_dir, _resume(cfg, run_dir))
    (run_dir / ".attempted").touch()
    env = dict(os.environ, **getattr(adapter, "env", lambda d: {})(run_dir))
    log = log_path(cfg, run_dir)
    step = last_logged_step(log) or 0
    write_status(run_dir, "running", step, command=argv)
    with open(run_dir / "trainer.log", "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=run_dir)
        try:
            while proc.poll() is None:
                time.sleep(POLL_S)
                step = last_logged_step(log_path(cfg, run_dir)) or step
                write_status(run_dir, "running", step, command=argv)
        finally:
            if proc.poll() is None:  # the job itself was stopped: do not leave the trainer behind
                proc.terminate()
                proc.wait(30)
    step = last_logged_step(log_path(cfg, run_dir)) or step
    if proc.returncode != 0:
        tail = (run_dir / "trainer.log").read_text(errors="replace")[-600:].strip().splitlines()
        write_status(run_dir, "failed", step, command=argv)
        raise RuntimeError(f"{argv[0]} exited {proc.returncode}: {tail[-1] if tail else ''}")
    write_status(run_dir, "done", step, command=argv)


def fit_defaults(trainer: dict[str, Any], fit: dict[str, Any]) -> dict[str, Any]:
    """A study's `fit:` for another trainer: what it says, else the adapter's defaults; with
    `trainer.step_cost` (no logged compute), x is "compute" = step x step_cost."""
    kind = trainer.get("kind", "ablate")
    out = {**FIT_DEFAULTS.get(kind, {}), **fit}
    if trainer.get("step_cost") is not None and "x" not in fit:
        out["x"] = "compute"
    return out


def curve_rows(run_dir: Path, fit: dict[str, Any]) -> bytes:
    """The run's curve as metrics.jsonl-style lines ({x: .., y: ..}) read with the existing
    readers from where its trainer wrote it; empty while nothing is logged yet."""
    from ablate.readers import READERS
    from ablate.readers.pick import pick

    cfg = run_dir_config(run_dir)
    path = log_path(cfg, run_dir)
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
