"""YAML sections `loss:` and `advantage:`: the policy loss (type, aggregation, the type's
options) and advantage normalization."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from trainer.algo.advantages import NORMALIZATIONS
from trainer.algo.losses import AGGREGATIONS, LOSSES, check_loss_options, loss_option_names
from trainer.config_parts.base import Strict


# The allowed names are the registries' (trainer/algo/losses.py, trainer/algo/advantages.py,
# which import no torch): a loss, an aggregation or a normalization registered there is valid
# here, in the order registered (what a validation error lists).
LossType = Literal[tuple(LOSSES.names())]  # type: ignore[valid-type]
Aggregation = Literal[tuple(AGGREGATIONS.names())]  # type: ignore[valid-type]
Normalization = Literal[tuple(NORMALIZATIONS.names())]  # type: ignore[valid-type]


def _loss_defaults(option: str) -> str:
    """'ppo 0.2, dapo 0.2, ...': the registered default of `option` for each type taking it."""
    return ", ".join(f"{t} {LOSSES.options(t)[option]:g}" for t in LOSSES.names()
                     if option in LOSSES.options(t))


class LossConfig(Strict):
    """Policy loss and its options. Which keys are options, and which of them each type takes,
    is the registry's (each type's `options=` in trainer/algo/losses.py): an option the chosen
    type does not take (eps_max with ppo, say) is an error; None takes the type's default. A
    field here that no type registers as an option is a plain setting, never checked as one."""

    type: LossType = Field(
        "cispo",
        description="Policy loss. cispo (ScaleRL): -sg(min(r, eps_max)) * A * logp; "
        "ppo: clipped token ratio; dapo: ppo with clip-higher (a larger eps_high); "
        "gspo: clipped sequence-level geometric-mean ratio.",
    )
    aggregation: Aggregation = Field(
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
        given = [k for k in loss_option_names() if getattr(self, k) is not None]
        check_loss_options(self.type, given)
        return self


class AdvantageConfig(Strict):
    normalization: Normalization = Field(
        "batch",
        description="A_i = r_i - mean(group); then / std of the group (prompt), / std of all "
        "advantages in the batch (batch, ScaleRL), or not at all (none).",
    )
    eps: float = Field(1e-6, gt=0, description="Added to the std to avoid division by zero.")
