"""The run directory: config.yaml, status.json, metrics.jsonl, checkpoint/ — all crash-safe.

Every file that is rewritten goes through a temp file/dir + rename, so a kill -9 at any moment
leaves either the old or the new version. metrics.jsonl is append-only; on resume, lines past
the checkpoint's step (and a torn last line) are dropped, so no step is lost or duplicated.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import yaml


def atomic_write(path: Path, text: str) -> None:
    """Temp file + fsync + rename: a kill -9 or a power loss leaves the old or the new file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_config(run_dir: Path, config) -> None:
    atomic_write(run_dir / "config.yaml",
                 yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))


def write_status(run_dir: Path, state: str, step: int, **extra) -> None:
    """status.json = {"state", "step", "updated" (unix time), "pid", **extra}, durably: the
    project's one writer of it (the trainer every step, ablate's launchers for pending/failed)."""
    atomic_write(run_dir / "status.json", json.dumps(
        {"state": state, "step": step, "updated": time.time(), "pid": os.getpid(), **extra}))


def read_status(run_dir: Path) -> dict:
    """The run's status.json, or {} when there is none yet (or it cannot be read)."""
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def append_metrics(run_dir: Path, row: dict) -> None:
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_metrics(run_dir: Path) -> list[dict]:
    rows = []
    try:
        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return rows
    for line in lines:
        try:
            rows.append(json.loads(line))
        except ValueError:
            break  # a torn last line from a kill mid-write
    return rows


def truncate_metrics(run_dir: Path, max_step: int | None) -> None:
    """Keep only complete lines with step <= max_step (None: the run restarts from scratch)."""
    keep = [r for r in read_metrics(run_dir) if max_step is not None and r["step"] <= max_step]
    atomic_write(run_dir / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in keep))


def checkpoint_dir(run_dir: Path) -> Path | None:
    """The latest complete checkpoint (recovering from a kill between the two renames)."""
    for name in ("checkpoint", "checkpoint.old"):
        d = run_dir / name
        if (d / "state.pt").exists():
            return d
    return None


def commit_checkpoint(run_dir: Path, tmp: Path) -> None:
    """Swap a fully written temp dir in as checkpoint/ (old kept until the new one is in)."""
    final, old = run_dir / "checkpoint", run_dir / "checkpoint.old"
    if not (final / "state.pt").exists() and (old / "state.pt").exists():
        shutil.rmtree(final, ignore_errors=True)  # killed between the renames last time
        os.rename(old, final)
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
