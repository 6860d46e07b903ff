"""The callable every job runs: train each of its runs (resuming), requeue on preemption.

A job carries only run-dir paths; the config is read from `<run_dir>/config.yaml`, written at
submission, so what ran is exactly what is on disk. On timeout or preemption submitit calls
`checkpoint()`, which resubmits this same object: the next attempt skips finished runs and
the trainer resumes the unfinished one from its checkpoint.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback
from pathlib import Path
from typing import Callable

import submitit
import yaml

from trainer.rundir import read_status, write_status

FINAL_STATES = ("done", "diverged")


def set_state(run_dir: Path, state: str, **fields) -> None:
    """Rewrite the run's status.json with a new state, keeping the trainer's other fields
    (step, error, ...) and adding `fields`."""
    status = read_status(run_dir)
    keep = {k: v for k, v in status.items() if k not in ("state", "step", "updated", "pid")}
    write_status(run_dir, state, status.get("step", 0), **{**keep, **fields})


def load_entry(spec: str) -> Callable:
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


class RunJob(submitit.helpers.Checkpointable):
    """Train `run_dirs` one after another; a failing run is recorded and the rest still run."""

    def __init__(self, run_dirs: list[str], entry: str = "trainer:run") -> None:
        self.run_dirs = [str(d) for d in run_dirs]
        self.entry = entry

    def __call__(self) -> list[str]:
        # A multi-task job's ranks find each other in the trainer (`trainer.distributed.read_env`
        # reads Slurm's variables), the one place that decides rank, world and master address.
        env = submitit.JobEnvironment()
        from trainer.config import TrainConfig

        fn = load_entry(self.entry)
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
                    set_state(d, "done")
            except Exception as e:  # noqa: BLE001 - recorded in the run dir, then re-raised below
                if env.global_rank == 0:
                    set_state(d, "failed", error=f"{type(e).__name__}: {e}",
                              traceback=traceback.format_exc()[-4000:])
                failed.append(f"{d.name}: {type(e).__name__}: {e}")
        if failed:
            raise RuntimeError("run(s) failed: " + "; ".join(failed))
        return self.run_dirs
