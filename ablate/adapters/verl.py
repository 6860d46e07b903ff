"""verl: axes are Hydra keys of verl's own config, passed as `key=value`.

Keys are checked by composing each variant with verl's Hydra config from the installed verl
package (`verl/trainer/config/ppo_trainer.yaml`, found without importing verl, whose import
needs GPUs' libraries), so a misspelled key is refused before anything is submitted. verl runs
only on GPUs (Ray + vLLM/SGLang); ablate launches `python -m verl.trainer.main_ppo` with the
run dir as `trainer.default_local_dir`, `trainer.resume_mode=auto` (verl's own checkpoint
resume) and its file logger writing the curve to `<run_dir>/verl_log.jsonl`.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any, Optional

from ablate.adapters.base import TrainerSpec, hydra_args, nearest, refuse_scalerl_key
from ablate.adapters.foreign import ForeignAdapter
from ablate.errors import InputError

# ablate TrainConfig path -> (verl key, how) or (None, why verl cannot express it).
SCALERL: dict[str, tuple[str | None, str]] = {
    "loss.type": ("actor_rollout_ref.actor.policy_loss.loss_mode",
                  "vanilla (PPO), gspo, cispo, ..."),
    "loss.eps_max": ("actor_rollout_ref.actor.clip_ratio_high", "CISPO's truncation"),
    "loss.aggregation": ("actor_rollout_ref.actor.loss_agg_mode",
                         "token-mean, seq-mean-token-mean, seq-mean-token-sum(-norm); "
                         "prompt-level has none"),
    "advantage.normalization": ("algorithm.norm_adv_by_std_in_grpo",
                                "with algorithm.adv_estimator=grpo: true = per-prompt std"),
    "precision.trainer_lm_head_fp32": (None, "verl has no FP32 LM head switch"),
    "precision.generator_lm_head_fp32": (None, "verl has no FP32 LM head switch"),
    "data.zero_variance_filter": ("algorithm.filter_groups.enable",
                                  "DAPO dynamic sampling (filter_groups.metric)"),
    "data.no_positive_resampling": (None, "verl keeps no per-prompt pass-rate history"),
    "off_policy.mode": ("actor_rollout_ref.actor.ppo_mini_batch_size",
                        "PPO-off-policy-k: mini-batches per rollout batch; async PipelineRL "
                        "is verl's separate fully_async_policy entry point"),
    "length.interrupt_text": (None, "verl has no forced interruption"),
}
SEED_KEY = "data.seed"
LOG = "verl_log.jsonl"


def verl_config_dir(given: Optional[str]) -> Path:
    """verl's Hydra config folder: `trainer.config_dir`, else the installed package's."""
    if given:
        return Path(given).expanduser().resolve()
    spec = importlib.util.find_spec("verl")  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise InputError("trainer kind verl: verl is not installed here (pip install "
                         "'ablate[verl]'), or set trainer.config_dir to verl/trainer/config")
    return Path(list(spec.submodule_search_locations)[0]) / "trainer" / "config"


def _leaves(node: Any, prefix: str = "") -> list[str]:
    from omegaconf import DictConfig

    if not isinstance(node, DictConfig):
        return [prefix.rstrip(".")]
    out: list[str] = []
    for k in node.keys():
        out += _leaves(node._get_node(k), f"{prefix}{k}.") if isinstance(
            node._get_node(k), DictConfig) else [f"{prefix}{k}"]
    return out


class VerlAdapter(ForeignAdapter):
    kind = "verl"
    default_log = LOG
    reserved = ("trainer.default_local_dir", "trainer.resume_mode", SEED_KEY)

    def __init__(self, config_dir: Optional[str] = None, config_name: str = "ppo_trainer") -> None:
        self.config_dir = verl_config_dir(config_dir)
        self.config_name = config_name
        if not (self.config_dir / f"{config_name}.yaml").is_file():
            raise InputError(f"trainer kind verl: no {config_name}.yaml in {self.config_dir}")

    @classmethod
    def from_spec(cls, spec: TrainerSpec) -> "VerlAdapter":
        return cls(spec.config_dir, spec.config_name)

    def compose(self, overrides: list[str]):
        try:
            from hydra import compose, initialize_config_dir
        except ImportError as e:
            raise InputError(f"trainer kind verl needs hydra-core: pip install 'ablate[verl]' ({e})") from None
        with initialize_config_dir(config_dir=str(self.config_dir), version_base=None):
            return compose(self.config_name, overrides=overrides)

    @functools.cached_property
    def keys(self) -> list[str]:
        return _leaves(self.compose([]))

    def check_key(self, key: str, where: str) -> None:
        refuse_scalerl_key(key, where, "verl", SCALERL)
        if key in self.reserved:
            raise InputError(f"{where}: '{key}' is set by ablate for each run; remove it")

    def check_overrides(self, overrides: dict[str, Any], where: str) -> None:
        """Compose the variant with verl's config: Hydra refuses a key that does not exist."""
        from hydra.errors import HydraException

        for k in overrides:
            self.check_key(k, where)
        try:
            self.compose(hydra_args(overrides))
        except HydraException as e:
            bad = next((k for k in overrides if f"'{k}'" in str(e)), None)
            if bad is not None and bad not in self.keys:
                raise InputError(f"{where}: '{bad}' is not a key of verl's {self.config_name} "
                                 f"{nearest(bad, self.keys)}") from None
            raise InputError(f"{where}: verl's config refuses the overrides: "
                             f"{str(e).splitlines()[0]}") from None

    def steps_key(self) -> str:
        return "trainer.total_training_steps"

    def argv(self, overrides: dict[str, Any], seed: int, run_dir: Path, resume: bool) -> list[str]:
        fixed = {"trainer.default_local_dir": str(run_dir / "checkpoints"),
                 "trainer.resume_mode": "auto", SEED_KEY: seed,
                 "trainer.logger": ["console", "file"]}
        return [sys.executable, "-m", "verl.trainer.main_ppo", *hydra_args({**overrides, **fixed})]

    @staticmethod
    def env(run_dir: Path) -> dict[str, str]:
        """verl's file logger writes where this variable says."""
        return {"VERL_FILE_LOGGER_PATH": str(run_dir / LOG)}
