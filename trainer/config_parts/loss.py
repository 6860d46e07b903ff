"""The policy loss (type, aggregation, the type's options) and advantage normalization."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from trainer.config_parts.base import Strict


# Each loss type's options with their defaults: the one table trainer/algo/losses.py reads and the
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


class LossConfig(Strict):
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


class AdvantageConfig(Strict):
    normalization: Literal["prompt", "batch", "none"] = Field(
        "batch",
        description="A_i = r_i - mean(group); then / std of the group (prompt), / std of all "
        "advantages in the batch (batch, ScaleRL), or not at all (none).",
    )
    eps: float = Field(1e-6, gt=0, description="Added to the std to avoid division by zero.")
