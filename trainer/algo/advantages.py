"""Advantages: A_i = r_i - mean(group), then normalized per `advantage.normalization`.

No critic, no KL (ScaleRL). The paper found prompt / batch / none to perform similarly; batch
(divide by the std of all advantages in the batch) is ScaleRL's choice. Each normalization is
one function registered under its YAML name; the config's allowed names are this registry's
(trainer/config_parts/loss.py), so importing this module must not import torch: the functions
use tensor methods only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from trainer.registry import Registry

if TYPE_CHECKING:
    import torch

NORMALIZATIONS: Registry[Callable[..., "torch.Tensor"]] = Registry("advantage.normalization")


def centered(rewards: "torch.Tensor", group_ids: "torch.Tensor"
             ) -> tuple["torch.Tensor", "torch.Tensor"]:
    """Rewards minus their group mean, and the inverse index of each sample's group."""
    _, inv = group_ids.unique(return_inverse=True)
    g = int(inv.max()) + 1
    sums = rewards.new_zeros(g).index_add(0, inv, rewards)
    counts = rewards.new_zeros(g).index_add(0, inv, rewards.new_ones(rewards.shape))
    return rewards - (sums / counts)[inv], inv


@NORMALIZATIONS.register("prompt")
def prompt(rewards, group_ids, eps):
    """Divide by the std of the sample's own group (GRPO)."""
    adv, inv = centered(rewards, group_ids)
    g = int(inv.max()) + 1
    sq = rewards.new_zeros(g).index_add(0, inv, adv ** 2)
    counts = rewards.new_zeros(g).index_add(0, inv, rewards.new_ones(rewards.shape))
    std = (sq / (counts - 1).clamp(min=1)).sqrt()  # unbiased, like torch.std
    return adv / (std[inv] + eps)


@NORMALIZATIONS.register("batch")
def batch(rewards, group_ids, eps):
    """Divide by the std of all centered advantages in the batch (ScaleRL)."""
    adv = centered(rewards, group_ids)[0]
    std = adv.std() if adv.numel() > 1 else adv.new_zeros(())
    return adv / (std + eps)


@NORMALIZATIONS.register("none")
def none(rewards, group_ids, eps):
    return centered(rewards, group_ids)[0]


def compute_advantages(rewards: "torch.Tensor", group_ids: "torch.Tensor", *, normalization: str,
                       eps: float = 1e-6) -> "torch.Tensor":
    """Advantages [B] from rewards [B] and group ids [B] (prompt of each sample)."""
    return NORMALIZATIONS.get(normalization)(rewards.double(), group_ids, eps).float()
