"""The run's rates, recorded as it trains: what its time plan assumed (the plan of this config
on this job's shape, made once at start) and what each step measured, summed over every
attempt, in the run dir's rates.json (trainer/plan/rates.py: its fields, and how the dry run
and `ablate status` read it).

Why here and cheap: the numbers are ones the loop has already (a batch's tokens and
generation seconds, the update's tokens and FLOPs, the step's wall) plus one clock read
around the update; the file is rewritten at most every WRITE_EVERY_S, at eval points and at
the end, by rank 0, in this process (no thread, no process of its own).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Optional

from trainer import rundir
from trainer.generation.eval_service import EVAL_SECONDS

WRITE_EVERY_S = 30.0
_SUMS = ("steps", "samples", "groups", "kept_groups", "completion_tokens", "generation_s",
         "train_s", "train_tokens", "train_flops", "wall_s", "flops", "evals", "eval_s")


def process_age_s() -> Optional[float]:
    """Seconds since this process started (Linux: /proc/self/stat's start time), so a job's
    start counts Python's imports and the launcher's set-up too; None where unreadable."""
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return up - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
    except (OSError, ValueError, IndexError):
        return None


def planned(config, shape) -> dict:
    """The plan's rates for this run on this job's shape ({} where it has none)."""
    from trainer.plan.rates import planned_rates
    from trainer.plan.time_plan import Limits, plan_time

    try:
        return planned_rates(plan_time(config, shape, Limits(gpu_model=shape.gpu_model)), config)
    except Exception as e:  # a plan that cannot be made must not stop training: say so
        return {"error": f"{type(e).__name__}: {e}"[:300]}


class RateLog:
    """Rank 0's record (the other ranks' is inert: `main` False)."""

    def __init__(self, run_dir, main: bool, plan: dict, entry_s: float,
                 shape: Optional[dict] = None) -> None:
        self.dir, self.main = run_dir, main
        doc = rundir.read_rates(run_dir) if main else {}
        old = doc.get("sums") or {}
        self.sums = {k: float(old.get(k, 0) or 0) for k in _SUMS}
        self.attempts = list(doc.get("attempts") or [])
        self.plan, self.entry_s, self.written = plan, entry_s, 0.0
        self.shape = shape or {}  # the job's (trainer/plan/topology.py JobShape): re-plans use it
        self.step_in_flight: dict = {}
        self.first = True

    def started(self, step: int) -> None:
        """The attempt reaches its loop (its evals and first step next): the job's start."""
        age = process_age_s()
        self.attempts.append({"resumed_from": step, "first_step_s": None,
                              "start_s": age if age is not None
                              else time.perf_counter() - self.entry_s})
        self.write()

    def batch(self, batch, groups: int, kept: int) -> None:
        ro = batch.rollout
        self.step_in_flight = {"samples": len(ro.tokens), "groups": groups, "kept_groups": kept,
                               "completion_tokens": sum(len(t) for t in ro.tokens),
                               "generation_s": float(batch.gen_seconds or 0.0)}

    def update(self, seconds: float, tokens: float, flops: float) -> None:
        self.step_in_flight.update(train_s=seconds, train_tokens=tokens, train_flops=flops)

    def step(self, wall_s: float, flops: float) -> None:
        """A finished step: its wall (the loop's, push included) and its FLOPs."""
        got, self.step_in_flight = self.step_in_flight, {}
        for k, v in {**got, "steps": 1, "wall_s": wall_s, "flops": flops}.items():
            self.sums[k] += v
        if self.first and self.attempts:
            self.attempts[-1]["first_step_s"] = wall_s
        self.first = False
        if time.monotonic() - self.written >= WRITE_EVERY_S:
            self.write()

    def eval_row(self, row: dict) -> None:
        """A finished eval's line (the eval worker's thread: numbers added, written later)."""
        sec = row.get(EVAL_SECONDS)
        if isinstance(sec, (int, float)):
            self.sums["evals"] += 1
            self.sums["eval_s"] += sec

    def write(self) -> None:
        """rates.json now (rank 0). A file that cannot be written costs the record, never the
        run (and never hides the error a failing run is being recorded with)."""
        if self.main:
            try:
                rundir.write_rates(self.dir, {"version": 1, "planned": self.plan,
                                              "shape": self.shape, "sums": self.sums,
                                              "attempts": self.attempts})
            except OSError as e:
                print(f"[trainer] rates.json not written: {e}", file=sys.stderr, flush=True)
            self.written = time.monotonic()
