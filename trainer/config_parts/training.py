"""YAML sections `data:`, `off_policy:`, `optim:` and `engine:`: how the trainer steps
(prompt-pool filters and curriculum, off-policy mode, optimizer, engine)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field

from trainer.algo.pool import CURRICULA
from trainer.config_parts.base import Strict
from trainer.torch_axes import ENGINES, MODES

# The allowed names are the registries' (torch-free): a curriculum registered in
# trainer/algo/pool.py, a mode or an engine in trainer/torch_axes.py is valid here, in the
# order registered.
Curriculum = Literal[tuple(CURRICULA.names())]  # type: ignore[valid-type]
OffPolicyMode = Literal[tuple(MODES.names())]  # type: ignore[valid-type]
EngineType = Literal[tuple(ENGINES.names())]  # type: ignore[valid-type]


class DataConfig(Strict):
    """Prompt-pool filtering and curriculum."""

    zero_variance_filter: bool = Field(
        True, description="Drop prompt groups whose samples all got the same reward (no gradient); "
        "drop, don't resample (ScaleRL)."
    )
    no_positive_resampling: bool = Field(
        True, description="Remove a prompt from later epochs once its historical pass rate >= "
        "`npr_threshold` (ScaleRL)."
    )
    npr_threshold: float = Field(0.9, gt=0, le=1, description="Pass rate that retires a prompt.")
    curriculum: Curriculum = Field(
        "none",
        description="Order of prompts: 'none' (shuffled epochs), 'easy_to_hard' (by the task's "
        "difficulty score), 'pass_rate' (highest measured pass rate first).",
    )


class OffPolicyConfig(Strict):
    mode: OffPolicyMode = Field(
        "pipeline",
        description="pipeline (PipelineRL-k, ScaleRL): generation runs concurrently; weights are "
        "pushed in flight after every step; trainer waits when k steps ahead. ppo_off_policy: "
        "generate a big batch, then k optimizer steps on its minibatches.",
    )
    k: int = Field(
        8, ge=1,
        description="pipeline: max staleness in optimizer steps: the generator runs at most k "
        "steps ahead of the trainer (PipelineRL's max_lag), older data is refused. "
        "ppo_off_policy: one generation of k x rollout.prompts_per_step prompts is split into "
        "k minibatches, one optimizer step each (so every step sees prompts_per_step prompts); "
        "with vLLM every node's engines generate a share of it on the same per-node split as "
        "pipeline mode, then the training GPUs train (trainer/plan/topology.py).",
    )
    groups_per_call: Optional[int] = Field(
        None, gt=0,
        description="pipeline: prompt groups per generate call of the streaming generator; each "
        "group enters the stream when its call returns and every step trains on the next "
        "rollout.prompts_per_step finished groups. Smaller calls stream finer (staleness "
        "counted per group, not per step's batch) at some batching cost with the hf sampler. "
        "None = a node's share of rollout.prompts_per_step (dealt over the nodes with vLLM, "
        "whose every node generates: trainer/generation/feeders.py).",
    )


class OptimConfig(Strict):
    lr: float = Field(5e-7, gt=0, description="Constant LR after warm-up (ScaleRL: 5e-7).")
    warmup_steps: int = Field(100, ge=0, description="Linear LR warm-up steps (ScaleRL: 100).")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    eps: float = Field(1e-15, gt=0, description="AdamW eps (ScaleRL: 1e-15).")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay (ScaleRL: 0.01).")
    grad_clip: float = Field(1.0, gt=0, description="Global grad-norm clip (ScaleRL: 1.0).")


class EngineConfig(Strict):
    type: EngineType = Field("torch", description="Optimizer engine.")
    zero_stage: int = Field(0, ge=0, le=3, description="deepspeed: ZeRO stage 0-3.")
    device: str = Field("auto", description="'auto' (cuda if available, else cpu), 'cpu', 'cuda'.")
    threads: Optional[int] = Field(
        None, gt=0,
        description="torch CPU threads (None = torch default). On a shared CPU 1 is often "
        "fastest for the proxy: spinning thread pools collapse under contention.",
    )
    micro_batch_tokens: Optional[int] = Field(
        None, gt=0,
        description="Tokens (prompt + completion, padding included) per forward/backward on "
        "one rank. A rank's rows are length-bucketed into micro-batches of at most this many "
        "tokens and their gradients accumulated, so the optimizer still steps once on the "
        "whole batch with the whole batch's loss denominators (same update as one big "
        "batch). Why: one forward over a rank's whole share holds every activation at once "
        "and pads every row to the longest; at 8B and 16k context that does not fit, and "
        "bucketing keeps padding small. A row longer than this forms a micro-batch alone. "
        "None = one micro-batch per rank (no accumulation).",
    )
    collective_timeout_minutes: float = Field(
        120.0, gt=0,
        description="How long a rank waits in one collective (barrier, broadcast, all-reduce) "
        "before the job fails: the process group's timeout. Why this long: with rollout.backend "
        "vllm rank 0 evaluates alone while the other ranks wait at the checkpoint's barrier, "
        "and a paper-scale eval (1,000 prompts x 16 samples at ~14k tokens) can take longer "
        "than torch's 30 minutes. A hung job still fails, after this long. Not part of the "
        "run id: it changes how long a stuck job waits, not what a run computes.",
    )
