"""How many jobs a run takes: the time plan's record (TimePlan), what a launch profile allows
one run (Limits), the jobs and requeues under its time limit, and whether an eval fits where
it runs (inside a job, behind the training ranks' barrier, before the next eval is due). The
plan's step and eval times come from time_plan.py; this is where they meet the profile.

Pure Python (no torch).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional

from trainer.config import TrainConfig
from trainer.plan.time_model import JOB_START_S_CPU, JOB_START_S_GPU, stop_saves_at_once


@dataclass
class TimePlan:
    """Seconds and hours of one run; `None`: not planned (the note says why)."""

    device: str = ""  # e.g. "H100 SXM (datasheet)", "CPU (measured on the 2-core machine)"
    steps: Optional[int] = None  # optimizer steps to the budget
    step_s: Optional[float] = None  # wall seconds per step
    generation_s: Optional[float] = None  # of a step: generation
    train_s: Optional[float] = None  # of a step: training
    overlap: str = ""  # how generation and training share a step
    generation_tokens_per_s: Optional[float] = None  # the job's engines together
    eval_s: Optional[float] = None  # one evaluation
    eval_cost_s: Optional[float] = None  # wall an eval adds to the run (time_plan.eval_cost_s)
    evals: Optional[int] = None  # evaluation points to the budget
    eval_blocks_training: Optional[bool] = None
    # the eval keeps its finished chunks across a requeue and waits in no collective
    # (trainer/loop/final_eval.py: every node's engines, rollouts paused): it may span jobs
    eval_resumable: bool = False
    eval_interval_s: Optional[float] = None  # wall between two evaluations (every_steps)
    checkpoint_s: Optional[float] = None
    checkpoints: Optional[int] = None
    wall_h: Optional[float] = None  # to the budget, job starts included
    # wall_h in parts (hours): "steps", "evals", "checkpoints", "job starts", "job ends" (each
    # requeued job's tail that keeps no step: the stop warning and the step that would not fit
    # whole); they sum to wall_h (time_plan._to_budget)
    wall_parts_h: dict = field(default_factory=dict)
    gpu_hours: Optional[float] = None  # wall x devices held
    devices: Optional[int] = None
    job_h: Optional[float] = None  # the profile's time limit per job
    jobs: Optional[int] = None  # jobs to the budget (1 + requeues)
    requeues: Optional[int] = None
    max_requeues: Optional[int] = None  # the profile's max_num_timeout (None: no limit known)
    # What submitit's max_num_timeout is set to for this run: the profile's integer, or under
    # `max_num_timeout: auto` the requeues derived here with headroom (auto_max_num_timeout)
    max_num_timeout: Optional[int] = None
    eval_jobs: Optional[int] = None  # jobs an eval's progress spans (chunks kept at requeues)
    steps_per_job: Optional[int] = None
    reaches_budget: Optional[bool] = None
    # the rates the plan took (trainer/plan/rates.py compares them with a run's measured ones)
    completion_tokens: Optional[float] = None  # a sample's completion
    kept_share: Optional[float] = None  # of a step's groups trained (zero-variance filter)
    flops_per_step: Optional[float] = None  # as the trainer counts them (the FLOPs budget's)
    train_flops_per_step: Optional[float] = None  # of those, training's (6N a processed token)
    engines: Optional[int] = None  # what generates (generation_tokens_per_s is theirs together)
    peak_flops: Optional[float] = None  # of one GPU (the MFU's denominator); None on CPU
    job_start_s: Optional[float] = None  # a job's start before its first step
    refill_s: Optional[float] = None  # a job's first step beyond a steady one
    basis: str = "assumed"  # "assumed" (the constants) or the runs the rates were measured on
    # before any run has measured: the plan at the uncertain constants' ends (plan_range)
    range: Optional[dict] = None
    problem: str = ""  # why it cannot reach the budget, and what to change (one line)
    warnings: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    note: str = ""

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Limits:
    """What the launch profile allows one run: a job's time limit, the requeues after it, the
    seconds of warning before it (Slurm's signal_delay_s); `max_requeues` None = unbounded."""

    time_min: Optional[float] = None
    max_requeues: Optional[int] = None
    signal_delay_s: Optional[float] = None
    gpu_model: Optional[str] = None
    time_key: str = "slurm.time_min"  # the profile key a message tells to raise
    requeue_key: Optional[str] = "slurm.max_num_timeout"  # None: not settable in the profile
    auto_requeues: bool = False  # max_num_timeout: auto (the job gets the derived requeues)


# `max_num_timeout: auto`: the requeues the plan derives, plus this share and AUTO_EXTRA more.
# Why headroom: the plan is an estimate (COMPLETION_SHARE, MFUs are assumptions), and a cap
# one short ends a run just before its budget; submitit counts only time-limit requeues
# against it (submitit/core/job_environment.py checkpoint_and_try_requeue: countdown =
# _timeout_countdown - timed_out), so preemptions take none of it.
AUTO_HEADROOM = 0.1
AUTO_EXTRA = 2


def auto_max_num_timeout(requeues: int) -> int:
    """submitit's max_num_timeout for a run whose plan needs `requeues` time-limit requeues."""
    return math.ceil(requeues * (1 + AUTO_HEADROOM)) + AUTO_EXTRA


# A stop's margin besides the checkpoint: the job requeues itself max(30 s, a tenth of the
# warning) before the limit whatever the trainer does (ablate/studies/launch/slurm.py
# requeue_within), and the stop reaches generation and eval at their next decode step and the
# trainer at its next all-reduce (seconds; trainer/dist/preempt.py): STOP_REACH_S, an assumption.
STOP_REACH_S = 30.0


def stop_margin_s(signal_delay_s: float) -> float:
    """Seconds of the stop signal's warning that the checkpoint cannot use."""
    return max(30.0, 0.1 * signal_delay_s) + STOP_REACH_S


def jobs(c: TrainConfig, tp: TimePlan, limits: Limits, run_s: float, start: float) -> None:
    """Jobs to the budget under a time limit (steps_per_job, jobs, requeues; the problem when
    the profile's requeues cannot reach the budget)."""
    if limits.time_min is None:
        tp.jobs, tp.requeues = 1, 0
        return
    job_s = limits.time_min * 60
    tp.job_h = job_s / 3600
    tp.max_requeues = limits.max_requeues
    steps = tp.steps or 0
    per_step = run_s / max(steps, 1)  # a step with its share of evals and checkpoints
    usable = job_s - start - (limits.signal_delay_s or 0)
    fit = _kept_steps(c, tp, limits, int(max(0.0, usable) // per_step), per_step)
    _requeues(c, tp, limits, fit, per_step, start)


def _kept_steps(c: TrainConfig, tp: TimePlan, limits: Limits, fit: int, per_step: float) -> int:
    """Of the `fit` steps a job runs, those it keeps at a requeue. A job keeps its work up to
    its last checkpoint: the stop signal (signal_delay_s before the limit) saves the last
    finished step at once (with the generation service) or at the next step boundary (before
    it), when that save fits in the warning; otherwise only the scheduled checkpoints
    (checkpoint.every_steps / every_minutes) survive a requeue (and a warning says so)."""
    warning = limits.signal_delay_s
    ckpt = tp.checkpoint_s or 0.0
    margin = stop_margin_s(warning or 0.0)
    at_once = stop_saves_at_once(c)
    need = ckpt + margin if at_once else tp.step_s + ckpt
    if warning is not None and warning < need and at_once:
        every = c.checkpoint.every_steps
        tp.warnings.append(
            f"signal_delay_s {warning:g} is less than a checkpoint ({_dur(ckpt)}) plus "
            f"{margin:.0f} s (the requeue's hold-back, the stop reaching a decode step): the "
            "save of the last finished step may not finish before the job requeues, so a "
            "requeue can lose the work since the last scheduled checkpoint; raise "
            f"slurm.signal_delay_s to {math.ceil((ckpt + STOP_REACH_S) * 1.5) + 60}")
        fit = (fit // every) * every
    elif warning is not None and warning < need:
        every = c.checkpoint.every_steps
        sched = f"checkpoint.every_steps {every}"
        if c.checkpoint.every_minutes:
            every = min(every, max(1, int(c.checkpoint.every_minutes * 60 // per_step)))
            sched += f", every_minutes {c.checkpoint.every_minutes:g}"
        tp.warnings.append(
            f"signal_delay_s {warning:g} is less than a step plus a checkpoint "
            f"({_dur(tp.step_s + ckpt)}): the stop signal cannot save at a step boundary, so "
            f"every requeue loses the work since the last scheduled checkpoint ({sched}); "
            f"raise slurm.signal_delay_s to {math.ceil((tp.step_s + ckpt) * 1.2)}")
        fit = (fit // every) * every
    return fit


def _requeues(c: TrainConfig, tp: TimePlan, limits: Limits, fit: int, per_step: float,
              start: float) -> None:
    """Jobs and requeues for `fit` kept steps a job; the problem when that is none, or more
    requeues than the profile allows."""
    job_s, steps = limits.time_min * 60, tp.steps or 0
    tp.steps_per_job = fit
    if fit <= 0:
        tp.jobs = None
        tp.reaches_budget = False
        tp.problem = (f"a job of {_dur(job_s)} keeps no step: a step with its share of evals "
                      f"and checkpoints takes {_dur(per_step)} after a {_dur(start)} start, and "
                      f"checkpoints come every {c.checkpoint.every_steps} steps; set "
                      "checkpoint.every_minutes below the job's length, raise "
                      "slurm.signal_delay_s above a step plus a checkpoint, or raise "
                      f"{limits.time_key}")
        return
    tp.jobs = math.ceil(steps / fit)
    tp.requeues = tp.jobs - 1
    tp.max_num_timeout = (auto_max_num_timeout(tp.requeues) if limits.auto_requeues
                          else limits.max_requeues)
    if limits.max_requeues is not None and tp.requeues > limits.max_requeues:
        tp.reaches_budget = False
        reach = (limits.max_requeues + 1) * fit
        raise_ = (f"raise {limits.requeue_key} to {tp.requeues} (or set it to auto) or "
                  f"{limits.time_key}"
                  if limits.requeue_key else f"raise {limits.time_key}")
        tp.problem = (f"needs {tp.jobs} jobs of {_dur(job_s)} ({tp.requeues} requeues) to reach "
                      f"{steps:,} steps, the profile allows {limits.max_requeues} requeues "
                      f"({limits.requeue_key or 'the executor default'}), which stop it near "
                      f"step {reach:,}; {raise_}, or lower the budget")
    else:
        tp.reaches_budget = True


def eval_checks(c: TrainConfig, tp: TimePlan, limits: Limits) -> None:
    """An eval that cannot finish where it runs: inside a job, or behind the training ranks'
    barrier (engine.collective_timeout_minutes); or not before the next eval is due. An eval
    that cannot finish comes first in `problem`: nothing after step 0 happens without it."""
    ev = tp.eval_s or 0.0
    n = c.eval.num_prompts or c.task.num_eval_prompts
    gpu = "CPU" not in tp.device
    start = tp.job_start_s if tp.job_start_s is not None else (
        JOB_START_S_GPU if gpu else JOB_START_S_CPU)
    job_s = limits.time_min * 60 if limits.time_min else None
    barrier = c.engine.collective_timeout_minutes * 60
    found = []
    usable = job_s - start - (limits.signal_delay_s or 0) if job_s is not None else None
    if usable is not None and ev > usable and tp.eval_blocks_training and tp.eval_resumable:
        # On every node's engines, training waiting: its chunks are kept at each requeue
        # and the resumed job decodes the rest on the same step's weights.
        tp.eval_jobs = math.ceil(ev / max(usable, 1.0))
        tp.warnings.append(f"one eval takes {_dur(ev)}, longer than a {_dur(job_s)} job: its "
                           f"finished chunks are kept at each requeue, so it ends over "
                           f"{tp.eval_jobs} jobs, training waiting, on the step's weights")
    elif usable is not None and ev > usable and tp.eval_blocks_training:
        found.append(f"one eval ({_eval_size(c)}) takes {_dur(ev)}, longer than a {_dur(job_s)} "
                     f"job: the step-0 eval never finishes; lower eval.num_prompts (about "
                     f"{_fewer(n, usable / 2, ev)} evaluate in half a job) or "
                     f"eval.samples_per_prompt, or raise {limits.time_key}")
    elif usable is not None and ev > usable:
        # Beside training, an eval keeps its finished chunks at each requeue (trainer/
        # checkpointing.py, EvalJob.done): it ends after ceil(eval / usable) jobs of progress.
        # It fails only when the next eval is due before it ends: evals would pile up.
        tp.eval_jobs = math.ceil(ev / max(usable, 1.0))
        if tp.eval_interval_s is not None and ev > tp.eval_interval_s:
            found.append(f"one eval ({_eval_size(c)}) takes {_dur(ev)} ({tp.eval_jobs} jobs of "
                         f"{_dur(job_s)}), longer than the {_dur(tp.eval_interval_s)} between "
                         f"evals (eval.every_steps {c.eval.every_steps}): evals pile up and the "
                         f"run never catches up; lower eval.num_prompts (about "
                         f"{_fewer(n, tp.eval_interval_s / 2, ev)} evaluate in half that) or "
                         "eval.samples_per_prompt, or raise eval.every_steps")
        else:
            tp.warnings.append(f"one eval takes {_dur(ev)}, longer than a {_dur(job_s)} job: "
                               f"its finished chunks are kept at each requeue, so it ends over "
                               f"{tp.eval_jobs} jobs beside training (each requeue redoes at "
                               "most the chunks in flight)")
    if tp.eval_blocks_training and ev > barrier and (tp.devices or 1) > 1 and gpu \
            and c.rollout.backend == "vllm" and not tp.eval_resumable:
        found.append(f"one eval ({_eval_size(c)}) takes {_dur(ev)} while the other training ranks "
                     f"wait at a barrier of {_dur(barrier)} (engine.collective_timeout_minutes): "
                     f"the job fails at its step-0 eval; lower eval.num_prompts (about "
                     f"{_fewer(n, barrier / 2, ev)} evaluate in half that) or raise "
                     "engine.collective_timeout_minutes")
    if found:
        tp.reaches_budget = False
        tp.problem = found[0]
    if not tp.eval_blocks_training and tp.eval_interval_s and ev > tp.eval_interval_s \
            and not tp.eval_jobs:
        tp.warnings.append(f"an eval takes {_dur(ev)}, longer than the {_dur(tp.eval_interval_s)} "
                           f"between evals (eval.every_steps {c.eval.every_steps}): evals queue up")
    if tp.eval_blocks_training and tp.evals and tp.wall_h:
        share = tp.evals * ev / 3600 / tp.wall_h
        if share > 0.2:
            tp.warnings.append(f"evals stop training for {share:.0%} of the wall time "
                               f"({tp.evals} evals of {_dur(ev)})")


def _fewer(n: int, room_s: float, eval_s: float) -> str:
    """Eval prompts that would take `room_s` (an eval's time is about linear in them)."""
    return f"{max(1, int(n * room_s / eval_s)):,}"


def _eval_size(c: TrainConfig) -> str:
    n = c.eval.num_prompts or c.task.num_eval_prompts
    return f"{n:,} prompts x {c.eval.samples_per_prompt}"


def _dur(s: float) -> str:
    """Seconds as the unit a person reads: 45 s, 12 min, 3.4 h."""
    if s < 120:
        return f"{s:.0f} s" if s >= 10 else f"{s:.2g} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def dur(s: Optional[float]) -> str:
    return "" if s is None else _dur(s)
