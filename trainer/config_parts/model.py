"""YAML sections `model:` (+ `model.proxy:`), `precision:`, `task:` and `reward:`: what a run
learns from and on."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, field_validator

from trainer.config_parts.base import Strict
from trainer.tasks import TASKS


# The task kinds are the registry's (trainer/tasks.py TASKS, torch-free): `task.name` is one of
# them; "reasoning_gym" takes the task after a colon.
TASK_KINDS = tuple(TASKS.names())


class ProxyModelConfig(Strict):
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


class ModelConfig(Strict):
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


class PrecisionConfig(Strict):
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


class TaskConfig(Strict):
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
            valid = ", ".join(f"'{k}:<task>'" if k == "reasoning_gym" else f"'{k}'"
                              for k in TASK_KINDS)
            raise ValueError(f"must be one of {valid} (e.g. reasoning_gym:basic_arithmetic)")
        return v


class RewardConfig(Strict):
    correct: float = Field(1.0, description="Reward of a verified-correct answer (ScaleRL: +1).")
    incorrect: float = Field(-1.0, description="Reward of a wrong answer (ScaleRL: -1).")
