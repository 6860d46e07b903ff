"""The callable every job runs: train each of its runs (resuming), requeue on preemption.

A job carries only run-dir paths; the config is read from `<run_dir>/config.yaml`, written at
submission, so what ran is exactly what is on disk. On timeout or preemption submitit calls
`checkpoint()`, which resubmits this same object: the next attempt skips finished runs and
the trainer resumes the unfinished one from its checkpoint.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Callable

import submitit
import yaml

FINAL_STATES = ("done", "diverged")


def _entry(spec: str) -> Callable:
    """'module:function' -> the function (lets tests swap in a tiny job; default trainer:run)."""
    mod, _, fn = spec.partition(":")
    return getattr(importlib.import_module(mod), fn)


@contextlib.contextmanager
def stdout_to_stderr():
    """Run in-process jobs with stdout sent to stderr (fd level too), so `--json` output stays
    pure even when a library logs to stdout (deepspeed does, imported via transformers)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def read_status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def write_status(run_dir: Path, status: dict) -> None:
    tmp = run_dir / "status.json.tmp"
    tmp.write_text(json.dumps(status))
    os.replace(tmp, run_dir / "status.json")


class RunJob(submitit.helpers.Checkpointable):
    """Train `run_dirs` one after another; a failing run is recorded and the rest still run."""

    def __init__(self, run_dirs: list[str], entry: str = "trainer:run") -> None:
        self.run_dirs = [str(d) for d in run_dirs]
        self.entry = entry

    def __call__(self) -> list[str]:
        env = submitit.JobEnvironment()
        if env.num_tasks > 1:
            # Multi-process job (e.g. one task per GPU): torch.distributed env from Slurm.
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        from trainer.config import TrainConfig

        fn = _entry(self.entry)
        failed: list[str] = []
        # Decided once, up front, so every rank of a multi-task job runs the same runs even
        # after rank 0 marks one done.
        todo = [d for d in map(Path, self.run_dirs) if read_status(d).get("state") not in FINAL_STATES]
        for d in todo:
            config = TrainConfig.model_validate(yaml.safe_load((d / "config.yaml").read_text()))
            try:
                fn(config, d)
                if env.global_rank == 0 and read_status(d).get("state") not in FINAL_STATES:
                    # Returned normally = finished, whatever the entry point wrote (or not).
                    write_status(d, {**read_status(d), "state": "done"})
            except Exception as e:  # noqa: BLE001 - recorded in the run dir, then re-raised below
                if env.global_rank == 0:
                    status = read_status(d)
                    status.update(state="failed", error=f"{type(e).__name__}: {e}",
                                  traceback=traceback.format_exc()[-4000:])
                    write_status(d, status)
                failed.append(f"{d.name}: {type(e).__name__}: {e}")
        if failed:
            raise RuntimeError("run(s) failed: " + "; ".join(failed))
        return self.run_dirs
