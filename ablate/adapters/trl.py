"""TRL's GRPOTrainer: axes are GRPOConfig fields, passed as `--key value`.

The run goes to `<run_dir>/trl` (TRL's `output_dir`, where its `checkpoint-N/` folders are);
the seed is TRL's `seed`; a retry passes `--resume_from_checkpoint true`, so TRL picks its own
latest checkpoint. The default program is `python -m ablate.adapters.trl_entry` (a tiny GRPO
script over a local model, a JSONL dataset and a reward function); `trainer.command` names
your own TRL script instead, which must accept the same flags (HfArgumentParser does).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Callable

from ablate.adapters.base import TrainerSpec, argparse_args, nearest, refuse_scalerl_key
from ablate.adapters.foreign import ForeignAdapter
from ablate.errors import InputError

# ablate TrainConfig path -> (TRL key, how) or (None, why TRL cannot express it). Also the
# table "The ScaleRL knobs in each trainer" in docs/trainers.md.
SCALERL: dict[str, tuple[str | None, str]] = {
    "loss.type": ("loss_type", "loss_type: cispo (with epsilon_high = CISPO's eps_max), dapo, grpo"),
    "loss.eps_max": ("epsilon_high", "epsilon_high is CISPO's truncation when loss_type: cispo"),
    "loss.aggregation": ("loss_type", "token-level: loss_type dapo; sample-level: grpo; "
                         "prompt-level has no TRL equivalent"),
    "advantage.normalization": ("scale_rewards", "scale_rewards: group | batch | none"),
    "precision.trainer_lm_head_fp32": ("cast_lm_head_to_fp32", "untied LM head only"),
    "precision.generator_lm_head_fp32": ("cast_lm_head_to_fp32", "one flag for both sides"),
    "data.zero_variance_filter": (None, "TRL has no zero-variance prompt filter"),
    "data.no_positive_resampling": (None, "TRL has no pass-rate history to drop solved prompts"),
    "off_policy.mode": ("steps_per_generation", "PPO-off-policy-k: steps_per_generation / "
                        "num_iterations; PipelineRL (in-flight weight push) has no TRL key"),
    "length.interrupt_text": (None, "TRL has no forced interruption (only max_completion_length)"),
}

# Flags of ablate.adapters.trl_entry beyond GRPOConfig: what to train on.
ENTRY_KEYS = ["model_name_or_path", "dataset", "reward", "eval_fraction"]


@functools.lru_cache(maxsize=1)
def grpo_fields() -> list[str]:
    """GRPOConfig's dataclass fields (imports trl: only when a study names it)."""
    try:
        from trl import GRPOConfig
    except ImportError as e:
        raise InputError(f"trainer kind trl needs TRL: pip install 'ablate[trl]' ({e})") from None
    return [f.name for f in dataclasses.fields(GRPOConfig)]


class TRLAdapter(ForeignAdapter):
    kind = "trl"
    default_log = "trl/log.jsonl"
    # Set by the adapter itself; an axis on them would break resuming or the run dir layout.
    reserved = ("output_dir", "seed", "resume_from_checkpoint")

    def __init__(self, command: str | None = None) -> None:
        self.script = command  # trainer.command: your TRL script instead of the entry

    @classmethod
    def from_spec(cls, spec: TrainerSpec) -> "TRLAdapter":
        return cls(spec.command)

    def check_key(self, key: str, where: str) -> None:
        refuse_scalerl_key(key, where, "TRL", SCALERL)
        if key in self.reserved:
            raise InputError(f"{where}: '{key}' is set by ablate for each run (run dir, seed, "
                             "resume); remove it")
        valid = grpo_fields() + ENTRY_KEYS
        if key not in valid:
            raise InputError(f"{where}: '{key}' is not a GRPOConfig field {nearest(key, valid)}")

    def check_overrides(self, overrides: dict[str, Any], where: str) -> None:
        for k in overrides:
            self.check_key(k, where)

    def steps_key(self) -> str:
        return "max_steps"

    def check_fit(self, loaded: Any, fit: dict[str, Any], where: Callable[[str], str]) -> None:
        super().check_fit(loaded, fit, where)
        if not self.script:  # ablate's own entry: TRL evaluates only when asked
            check_eval_column(loaded, str(fit.get("y", "")), where("y"))

    def env(self, run_dir: Path) -> dict[str, str]:
        """The built-in entry runs from the run dir: put the `ablate` this job imported first on
        the child's path, so it runs the same code even when ablate is not installed (or is
        installed elsewhere) and the job found it through its working directory."""
        if self.script:
            return {}
        root = str(Path(__file__).resolve().parents[2])
        rest = os.environ.get("PYTHONPATH", "")
        return {"PYTHONPATH": root + (os.pathsep + rest if rest else "")}

    def argv(self, overrides: dict[str, Any], seed: int, run_dir: Path, resume: bool) -> list[str]:
        prog = shlex.split(self.script) if self.script else [sys.executable, "-m",
                                                                "ablate.adapters.trl_entry"]
        fixed = {"output_dir": str(run_dir / "trl"), "seed": seed}
        if resume:
            fixed["resume_from_checkpoint"] = True
        return prog + argparse_args({**overrides, **fixed})


def check_eval_column(loaded: Any, y: str, where: str) -> None:
    """TRL logs `eval_*` columns only when it evaluates: GRPOConfig's eval_strategy defaults
    to "no" (transformers TrainingArguments.eval_strategy), so such a fit would find nothing."""
    if not y.startswith("eval_"):
        return
    tree = loaded.base_tree if isinstance(loaded.base_tree, dict) else {}
    values = [tree.get("eval_strategy", "no"), *loaded.study.axes.get("eval_strategy", [])]
    if all(str(v) == "no" for v in values):
        raise InputError(f"{where}: fit.y '{y}' is an eval column, but TRL never evaluates in "
                         "this study (eval_strategy is 'no'); set overrides.eval_strategy: steps "
                         "and eval_steps, or fit a train column (e.g. reward)")
