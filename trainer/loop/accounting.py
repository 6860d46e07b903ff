"""Compute accounting of a run: samples, tokens, FLOPs (generation and training) and
device-hours, and the budget they are spent against.

Why a module of its own: these counters are the curve's x axes (trainer/rundir.py
COMPUTE_COLUMNS), so how each is counted must be findable in one place. `_Run`
(trainer/loop/train.py) mixes this class in; the methods use the run's `c`, `device`, `world`, `step`,
`n_params` and `counters` (checkpointed with the run, trainer/loop/checkpoint.py).
"""

from __future__ import annotations

from trainer.devices import job_devices
from trainer.dist.groups import broadcast_object


def new_counters() -> dict:
    """The counters of a run that has not started: what metrics rows and the budget read."""
    return {"samples": 0, "tokens": 0, "flops_gen": 0.0, "flops_train": 0.0, "wall": 0.0,
            "zero_variance_dropped": 0, "gen_counter": 0}


class Accounting:
    """Counters and budget of `_Run` (see the module doc)."""

    def count_generation(self, batch) -> None:
        """Samples and generation FLOPs, including tokens of samples the source discarded."""
        ro = batch.rollout
        self.counters["samples"] += len(ro.tokens)
        self.counters["flops_gen"] += 2.0 * self.n_params * (sum(ro.gen_tokens)
                                                            + batch.dropped_gen_tokens)

    def budget_used(self) -> list[tuple[float, float]]:
        """(used, limit) for each limit the budget sets: steps, device-hours, FLOPs."""
        b, k = self.c.budget, self.counters
        return [(used, limit) for used, limit in (
            (self.step, b.steps), (self.gpu_hours(), b.gpu_hours),
            (k["flops_gen"] + k["flops_train"], b.flops)) if limit is not None]

    def budget_spent(self) -> bool:
        """Rank 0's verdict on every rank: wall-clock budgets would differ between ranks."""
        return broadcast_object(any(used >= limit for used, limit in self.budget_used()))

    def budget_fraction(self) -> float:
        """How much of the budget is spent, 0-1: the largest share of any limit (a FLOPs or
        device-hour budget has no step total for a progress bar to count to)."""
        return min(1.0, max(used / limit for used, limit in self.budget_used()))

    def gpu_hours(self) -> float:
        """Device-hours: train-loop wall (checkpoints, and the eval's launch, excluded; the eval
        itself decodes beside training and its own time is logged as eval/seconds, on no
        axis) x every device the job
        holds, training and generation GPUs alike (trainer/devices.py; a CPU process counts
        as one device), so off-policy modes of one job shape share one x axis."""
        if not hasattr(self, "devices"):
            self.devices = job_devices(self.c, self.device, self.world)
        return self.counters["wall"] * self.devices / 3600

