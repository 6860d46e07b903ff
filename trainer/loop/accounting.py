"""Compute accounting of a run: samples, tokens, FLOPs (generation and training) and
device-hours, and the budget they are spent against.

Why a module of its own: these counters are the curve's x axes (trainer/rundir.py
COMPUTE_COLUMNS), so how each is counted must be findable in one place. The counters live in
the run's state (trainer/loop/state.py Counters, checkpointed); the training side's tokens and
FLOPs are counted by the update (trainer/loop/update.py), generation's here.
"""

from __future__ import annotations

from trainer.config import TrainConfig
from trainer.dist.groups import broadcast_object
from trainer.loop.state import Counters, TrainState


def count_generation(counters: Counters, batch, n_params: int) -> None:
    """Samples and generation FLOPs, including tokens of samples the source discarded."""
    ro = batch.rollout
    counters.samples += len(ro.tokens)
    counters.flops_gen += 2.0 * n_params * (sum(ro.gen_tokens) + batch.dropped_gen_tokens)


class Budget:
    """The run's budget (budget.steps / gpu_hours / flops) and how much of it is spent.

    `devices`: every device the job holds, training and generation GPUs alike (the job's
    topology, trainer/plan/topology.py; a CPU process counts as one device), so off-policy
    modes of one job shape share one x axis."""

    def __init__(self, config: TrainConfig, devices: int) -> None:
        self.budget, self.devices = config.budget, devices

    def gpu_hours(self, counters: Counters) -> float:
        """Device-hours: train-loop wall (checkpoints, and the eval's launch, excluded; the eval
        itself decodes beside training and its own time is logged as eval/seconds, on no
        axis) x every device the job holds."""
        return counters.wall * self.devices / 3600

    def used(self, state: TrainState) -> list[tuple[float, float]]:
        """(used, limit) for each limit the budget sets: steps, device-hours, FLOPs."""
        b, k = self.budget, state.counters
        return [(used, limit) for used, limit in (
            (state.step, b.steps), (self.gpu_hours(k), b.gpu_hours),
            (k.flops_gen + k.flops_train, b.flops)) if limit is not None]

    def spent(self, state: TrainState) -> bool:
        """Rank 0's verdict on every rank: wall-clock budgets would differ between ranks."""
        return broadcast_object(any(used >= limit for used, limit in self.used(state)))

    def fraction(self, state: TrainState) -> float:
        """How much of the budget is spent, 0-1: the largest share of any limit (a FLOPs or
        device-hour budget has no step total for a progress bar to count to)."""
        return min(1.0, max(used / limit for used, limit in self.used(state)))
