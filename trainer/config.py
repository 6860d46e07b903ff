"""TrainConfig: every knob of one RL run, with the ScaleRL recipe as the defaults.

Plain data (pydantic v2, `extra="forbid"` everywhere so a typo is an error, not a silent
default). Section names are the dotted prefixes that study YAMLs use as axes, e.g.
`loss.type`, `loss.aggregation`, `advantage.normalization`, `off_policy.mode`.

Sources: ScaleRL = Khatri et al., "The Art of Scaling RL Compute for LLMs", arXiv 2510.13786
(see shared/scalerl.md). DAPO = Yu et al. 2025 (arXiv 2503.14476). GSPO = Zheng et al. 2025
(arXiv 2507.18071). CISPO = MiniMax-M1 (arXiv 2506.13585). PipelineRL = Piche et al. 2025.

Each Literal below names registered implementations (trainer registries); a test checks that
the names here and the registries agree. This module imports only pydantic so that `ablate`
can validate thousands of variants quickly without importing torch.
"""

from __future__ import annotations

import math

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# Task kinds registered in trainer.tasks.TASKS; `task.name` is one of them ("reasoning_gym"
# takes the task after a colon).
TASK_KINDS = ("arithmetic", "reasoning_gym", "math")


# Each loss type's options with their defaults: the one table trainer/losses.py reads and the
# LossConfig fields below quote. Values from shared/scalerl.md: PPO-clip eps 0.2/0.2; DAPO
# clip-higher raises eps_high to 0.28; GSPO's sequence-level ratio needs a clip scale ~1e-3
# (1e-4 did not work); CISPO's truncation eps_max 4 (4-8 all worked).
LOSS_OPTIONS: dict[str, dict[str, float]] = {
    "ppo": {"eps_low": 0.2, "eps_high": 0.2},
    "dapo": {"eps_low": 0.2, "eps_high": 0.28},
    "gspo": {"eps_low": 1e-3, "eps_high": 1e-3},
    "cispo": {"eps_max": 4.0},
}


def check_loss_options(loss_type: str, given) -> None:
    """ValueError naming the loss, the options it does not take and the ones it does."""
    valid = LOSS_OPTIONS.get(loss_type, {})
    unknown = [k for k in given if k not in valid]
    if unknown:
        raise ValueError(f"loss.type {loss_type!r} does not take {', '.join(unknown)}; its "
                         f"options: {', '.join(valid) or 'none'}")


def _loss_defaults(option: str) -> str:
    """'ppo 0.2, dapo 0.2, ...': the default of `option` for each type that takes it."""
    return ", ".join(f"{t} {o[option]:g}" for t, o in LOSS_OPTIONS.items() if option in o)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ProxyModelConfig(_Strict):
    """A tiny Llama-style model built from a config (no download) with a character tokenizer.

    Used when `model.name_or_path` is None: the CPU proxy that lets a study run on a laptop.
    """

    hidden_size: int = Field(128, gt=0, description="Width of the tiny model.")
    num_layers: int = Field(4, gt=0, description="Transformer blocks.")
    num_heads: int = Field(4, gt=0, description="Attention heads (hidden_size must divide).")
    intermediate_size: int = Field(256, gt=0, description="MLP width.")
    max_position_embeddings: int = Field(256, gt=0, description="Longest prompt+completion.")
    warmup_target: Optional[float] = Field(
        0.25, gt=0, lt=1,
        description="Supervised warm-up before RL (a model from a config has zero reward): train "
        "until the held-out pass rate, measured as eval measures it (mean@16 over the first "
        "`warmup_eval_prompts` held-out problems, temperature 1), is within `warmup_band` of "
        "this value. A target, not a step count: where a fixed number of steps lands depends on "
        "the machine's floating-point path, a measured pass rate does not. None = no warm-up.",
    )
    warmup_band: float = Field(
        0.015, gt=0, lt=0.5, description="Half-width of the accepted warm-up pass-rate band."
    )
    warmup_max_steps: int = Field(
        6000, gt=0, description="Step cap of the warm-up; reaching it without entering the band "
        "is an error that names the pass rate reached."
    )
    warmup_eval_prompts: int = Field(
        200, gt=0, description="Held-out problems the warm-up's stopping rule measures on."
    )
    warmup_lr: float = Field(3e-3, gt=0, description="Learning rate of the supervised warm-up.")
    warmup_batch_size: int = Field(64, gt=0, description="Batch size of the supervised warm-up.")


class ModelConfig(_Strict):
    name_or_path: Optional[str] = Field(
        None,
        description="HF model id or local path. None builds the tiny CPU proxy from `proxy`.",
    )
    proxy: ProxyModelConfig = Field(default_factory=ProxyModelConfig)
    chat_template: bool = Field(
        False, description="Wrap prompts with the tokenizer's chat template (real models)."
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in backward to save memory (large models)."
    )


class PrecisionConfig(_Strict):
    """ScaleRL: an FP32 LM head in BOTH generator and trainer fixes the log-prob mismatch
    between them (A rose 0.52 -> 0.61 in the paper)."""

    dtype: Literal["fp32", "bf16"] = Field(
        "bf16", description="Compute dtype of the model body (trainer and generator)."
    )
    generator_lm_head_fp32: bool = Field(
        True, description="Compute the generator's final projection (LM head) in fp32."
    )
    trainer_lm_head_fp32: bool = Field(
        True, description="Compute the trainer's final projection (LM head) in fp32."
    )


class TaskConfig(_Strict):
    """Where prompts come from and how answers are scored (verifiable rewards)."""

    name: str = Field(
        "arithmetic",
        description="'arithmetic' (built-in fixed-width a+b, the fast CPU proxy), "
        "'reasoning_gym:<task>' (any reasoning-gym task), or 'math' (local JSONL/parquet with "
        "`problem`/`answer` columns scored by math-verify).",
    )
    digits: int = Field(2, ge=1, le=12, description="arithmetic: digits per operand.")
    operators: list[Literal["+", "-", "*"]] = Field(
        default_factory=lambda: ["+"], min_length=1, description="arithmetic: operators drawn."
    )
    reversed_answer: bool = Field(
        False,
        description="arithmetic: write the answer least-significant digit first (after its "
        "sign), as in Lee et al. 2023, 'Teaching Arithmetic to Small Transformers': each digit "
        "then depends only on the operands' digits and the carry just written. On the CPU "
        "proxy its RL curve rises more smoothly, but its supervised warm-up learns in a sudden "
        "jump whose timing depends on the floating-point path (benchmarks/RESULTS.md).",
    )
    path: Optional[str] = Field(None, description="math: local .jsonl/.parquet file.")
    num_train_prompts: int = Field(4096, gt=0, description="Size of the training prompt pool.")
    rl_pool: Optional[int] = Field(
        None, gt=0,
        description="RL draws only from the first N training problems (None = all of them). "
        "The CPU proxy's supervised warm-up still learns from all `num_train_prompts`, so a "
        "small pool is a data-limited RL run from the same warmed model, not a weaker model.",
    )
    num_eval_prompts: int = Field(
        1000, gt=0, description="Held-out prompts, disjoint from training (paper: 1,000)."
    )
    data_seed: int = Field(
        1234, description="Seed of the prompt pool; fixed across runs so variants see the same data."
    )
    unanswerable_fraction: float = Field(
        0.0, ge=0, lt=1,
        description="Calibration control: this share of the problems eval scores (held-out or "
        "the pool's copies, per `eval.split`; spread evenly so every prefix of the eval list "
        "holds it, independent of difficulty) is scored wrong whatever the answer; training is "
        "untouched. A variant with fraction f has a known "
        "ceiling: (1 - f) x the base's asymptote A. Not seen by the proxy warm-up.",
    )

    @field_validator("name")
    @classmethod
    def _known_task(cls, v: str) -> str:
        kind, _, rest = v.partition(":")
        if kind not in TASK_KINDS or (kind == "reasoning_gym") != bool(rest):
            raise ValueError("must be 'arithmetic', 'math' or 'reasoning_gym:<task>' "
                             "(e.g. reasoning_gym:basic_arithmetic)")
        return v


class RewardConfig(_Strict):
    correct: float = Field(1.0, description="Reward of a verified-correct answer (ScaleRL: +1).")
    incorrect: float = Field(-1.0, description="Reward of a wrong answer (ScaleRL: -1).")


class VLLMConfig(_Strict):
    """Settings of the vllm rollout backend (ignored by hf). Not part of what a run learns,
    but they are part of the resolved config like every other knob."""

    enforce_eager: bool = Field(
        True, description="Run vLLM without CUDA graphs: start-up is seconds instead of a "
        "graph capture per batch size, decoding somewhat slower. False for long runs on GPUs.",
    )
    gpu_memory_utilization: Optional[float] = Field(
        None, gt=0, le=1,
        description="Share of its GPU's memory vLLM may take (weights + KV cache). None = 0.9 "
        "on generation GPUs of its own, 0.3 when it shares the one GPU with the trainer.",
    )
    generation_gpus: Optional[int] = Field(
        None, gt=0,
        description="Pipeline mode on a multi-GPU node: how many of the node's GPUs run vLLM "
        "(the rest train). None = half, rounded down. A one-GPU node is always shared.",
    )
    tensor_parallel_size: Optional[int] = Field(
        None, gt=0,
        description="GPUs per vLLM replica (tensor parallel, inside one node); it must divide "
        "generation_gpus. None = one replica over all of a node's generation GPUs. "
        "trainer/distributed.py plan_topology derives the job's replicas from it.",
    )
    data_parallel_replicas: Optional[int] = Field(
        None, gt=0,
        description="vLLM engines (data-parallel replicas, each tensor_parallel_size GPUs, each "
        "its own process) that serve one job's generation and eval: a call's prompt groups are "
        "dealt to them by tokens, results merged in order, weights pushed to all. They run on "
        "rank 0's node: at most its generation GPUs / tensor_parallel_size. None = that many "
        "on GPUs, 1 on CPU.",
    )


class RolloutConfig(_Strict):
    backend: Literal["hf", "vllm"] = Field(
        "hf", description="'hf': transformers generate (any device); 'vllm': vLLM engine."
    )
    prompts_per_step: int = Field(48, gt=0, description="Prompts per step (ScaleRL: 48).")
    generations_per_prompt: int = Field(
        16, gt=1, description="Samples per prompt, G (ScaleRL: 16 -> 768 completions/step)."
    )
    max_new_tokens: int = Field(
        12288, gt=0, description="Hard cap on generated tokens per sample (thinking + answer)."
    )
    temperature: float = Field(1.0, gt=0, description="Sampling temperature (ScaleRL: 1.0).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling (1.0 = off).")
    vllm: VLLMConfig = Field(default_factory=VLLMConfig)


class LengthConfig(_Strict):
    """Length control (ScaleRL: forced interruption; alternative: DAPO overlong penalty)."""

    control: Literal["interrupt", "overlong_penalty", "none"] = Field(
        "interrupt", description="How over-long generations are handled."
    )
    thinking_budget: int = Field(
        12288, gt=0, description="interrupt: thinking tokens before the interruption text."
    )
    budget_min_fraction: float = Field(
        10 / 12, gt=0, le=1,
        description="interrupt: per-sample budget drawn uniformly in [fraction*budget, budget] "
        "(paper: 10k-12k for a 12k budget).",
    )
    answer_budget: int = Field(
        2048, gt=0, description="interrupt: tokens allowed for the answer after interruption."
    )
    interrupt_text: str = Field(
        "Okay, time is up. Let me stop thinking and formulate a final answer now. </think>",
        description="interrupt: text appended when the budget is hit (paper's wording).",
    )
    think_end: str = Field(
        "</think>",
        description="interrupt: the marker that closes thinking; a sample that wrote it within "
        "its drawn budget is not interrupted, and its answer budget counts from it.",
    )
    overlong_max: int = Field(
        12288, gt=0, description="overlong_penalty: L_max in clip((L_max-|y|)/L_cache - 1, -1, 0)."
    )
    overlong_cache: int = Field(
        2048, gt=0, description="overlong_penalty: L_cache, the soft-penalty window."
    )


class LossConfig(_Strict):
    """Policy loss and its options. An option the chosen type does not take (eps_max with
    ppo, say) is an error; None takes the type's default (LOSS_OPTIONS)."""

    type: Literal["ppo", "dapo", "gspo", "cispo"] = Field(
        "cispo",
        description="Policy loss. cispo (ScaleRL): -sg(min(r, eps_max)) * A * logp; "
        "ppo: clipped token ratio; dapo: ppo with clip-higher (a larger eps_high); "
        "gspo: clipped sequence-level geometric-mean ratio.",
    )
    aggregation: Literal["sample", "prompt", "token"] = Field(
        "prompt", description="How per-token terms are averaged (ScaleRL: prompt)."
    )
    eps_low: Optional[float] = Field(
        None, ge=0, description="ppo/dapo/gspo: the ratio is clipped below at 1 - eps_low. "
        f"None = the type's default ({_loss_defaults('eps_low')}).",
    )
    eps_high: Optional[float] = Field(
        None, ge=0, description="ppo/dapo/gspo: the ratio is clipped above at 1 + eps_high. "
        f"None = the type's default ({_loss_defaults('eps_high')}).",
    )
    eps_max: Optional[float] = Field(
        None, gt=0, description="cispo: the importance weight is truncated at eps_max "
        f"(4-8 all work). None = the default ({_loss_defaults('eps_max')}).",
    )

    @model_validator(mode="after")
    def _options_of_type(self) -> "LossConfig":
        given = [k for k in ("eps_low", "eps_high", "eps_max") if getattr(self, k) is not None]
        check_loss_options(self.type, given)
        return self


class AdvantageConfig(_Strict):
    normalization: Literal["prompt", "batch", "none"] = Field(
        "batch",
        description="A_i = r_i - mean(group); then / std of the group (prompt), / std of all "
        "advantages in the batch (batch, ScaleRL), or not at all (none).",
    )
    eps: float = Field(1e-6, gt=0, description="Added to the std to avoid division by zero.")


class DataConfig(_Strict):
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
    curriculum: Literal["none", "easy_to_hard", "pass_rate"] = Field(
        "none",
        description="Order of prompts: 'none' (shuffled epochs), 'easy_to_hard' (by the task's "
        "difficulty score), 'pass_rate' (highest measured pass rate first).",
    )


class OffPolicyConfig(_Strict):
    mode: Literal["pipeline", "ppo_off_policy"] = Field(
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
        "k minibatches, one optimizer step each (so every step sees prompts_per_step prompts).",
    )
    groups_per_call: Optional[int] = Field(
        None, gt=0,
        description="pipeline: prompt groups per generate call of the streaming generator; each "
        "group enters the stream when its call returns and every step trains on the next "
        "rollout.prompts_per_step finished groups. Smaller calls stream finer (staleness "
        "counted per group, not per step's batch) at some batching cost with the hf sampler. "
        "None = rollout.prompts_per_step.",
    )


class OptimConfig(_Strict):
    lr: float = Field(5e-7, gt=0, description="Constant LR after warm-up (ScaleRL: 5e-7).")
    warmup_steps: int = Field(100, ge=0, description="Linear LR warm-up steps (ScaleRL: 100).")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    eps: float = Field(1e-15, gt=0, description="AdamW eps (ScaleRL: 1e-15).")
    weight_decay: float = Field(0.01, ge=0, description="AdamW weight decay (ScaleRL: 0.01).")
    grad_clip: float = Field(1.0, gt=0, description="Global grad-norm clip (ScaleRL: 1.0).")


class EngineConfig(_Strict):
    type: Literal["torch", "deepspeed"] = Field("torch", description="Optimizer engine.")
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


class EvalConfig(_Strict):
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
        "rollout.backend vllm eval goes through the job's engine in one call (vLLM schedules "
        "its own KV cache).",
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
    # Eval samples with the hf sampler on the trainer's own weights (whatever the rollout
    # backend), with the same length control and a fixed seed, so successive points differ
    # only by the model.


class BudgetConfig(_Strict):
    """When to stop: the first limit reached ends the run."""

    steps: Optional[int] = Field(None, gt=0, description="Optimizer steps.")
    gpu_hours: Optional[float] = Field(None, gt=0, description="Device-hours (wall x devices).")
    flops: Optional[float] = Field(None, gt=0, description="Generation + training FLOPs.")

    @model_validator(mode="after")
    def _one_limit(self) -> "BudgetConfig":
        if self.steps is None and self.gpu_hours is None and self.flops is None:
            raise ValueError("budget needs at least one of steps, gpu_hours, flops")
        return self


class CheckpointConfig(_Strict):
    every_steps: int = Field(
        50, gt=0, description="Save a resumable checkpoint every N steps (and at every eval)."
    )
    every_minutes: Optional[float] = Field(
        None, gt=0,
        description="Also save when this many wall-clock minutes have passed since the last "
        "checkpoint (checked at step boundaries; None: steps only). A Slurm preemption/timeout "
        "signal (USR2) always saves at the next step boundary.",
    )


class LoggingConfig(_Strict):
    """Experiment trackers the run also logs to (metrics.jsonl is always written and stays the
    truth). Every metrics-line field is logged at its step; run name = the variant's name,
    study name = W&B group / MLflow experiment. A tracker that fails is switched off with a
    warning; it never stops the run. Not part of the run id: logging changes no result."""

    backends: list[Literal["tensorboard", "wandb", "mlflow"]] = Field(
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


class TrainConfig(_Strict):
    """One RL run. Defaults are the ScaleRL recipe."""

    seed: int = Field(0, description="Seed of sampling, init and data order for this run.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    precision: PrecisionConfig = Field(default_factory=PrecisionConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    length: LengthConfig = Field(default_factory=LengthConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    off_policy: OffPolicyConfig = Field(default_factory=OffPolicyConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    budget: BudgetConfig = Field(default_factory=lambda: BudgetConfig(steps=2000))
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
