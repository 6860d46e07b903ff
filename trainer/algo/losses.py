"""Policy losses (ppo, dapo, gspo, cispo) x aggregations (sample, prompt, token).

The math is the contract in DESIGN.md. Per-token terms l are computed by the loss type and then
averaged by the aggregation; both are registries so `loss.type` / `loss.aggregation` in a YAML
name one function each. No KL term and no critic (ScaleRL).
"""

from __future__ import annotations

from typing import Callable

import torch

from trainer.config import LOSS_OPTIONS, check_loss_options
from trainer.registry import Registry

# (logp, old_logp, adv[B,1], mask, *, <the type's options>) -> (per-token terms [B,T], stats)
TokenLoss = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]
LOSSES: Registry[TokenLoss] = Registry("loss.type")
AGGREGATIONS: Registry[Callable[..., torch.Tensor]] = Registry("loss.aggregation")


def _clipped(ratio: torch.Tensor, adv: torch.Tensor, eps_low: float, eps_high: float):
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    # A token is "clipped" when the clipped branch is the active (smaller) one.
    return -torch.minimum(unclipped, clipped), (clipped < unclipped).float()


@LOSSES.register("ppo")
def ppo(logp, old_logp, adv, mask, *, eps_low, eps_high):
    """GRPO/PPO-clip: per-token -min(r a, clip(r, 1-eps_low, 1+eps_high) a)."""
    ratio = torch.exp(logp - old_logp)
    terms, clipped = _clipped(ratio, adv, eps_low, eps_high)
    return terms, {"ratio": ratio.detach(), "clipped": clipped}


@LOSSES.register("dapo")
def dapo(logp, old_logp, adv, mask, *, eps_low, eps_high):
    """DAPO clip-higher: the PPO term; only its default eps_high is larger (LOSS_OPTIONS)."""
    return ppo(logp, old_logp, adv, mask, eps_low=eps_low, eps_high=eps_high)


@LOSSES.register("gspo")
def gspo(logp, old_logp, adv, mask, *, eps_low, eps_high):
    """GSPO: one sequence-level ratio s = exp(mean_t(logp - old_logp)) shared by all tokens."""
    n = mask.sum(-1).clamp(min=1)
    s = torch.exp(((logp - old_logp) * mask).sum(-1) / n)  # [B]
    s_tok = s[:, None].expand_as(logp)
    terms, clipped = _clipped(s_tok, adv, eps_low, eps_high)
    return terms, {"ratio": s_tok.detach(), "clipped": clipped}


@LOSSES.register("cispo")
def cispo(logp, old_logp, adv, mask, *, eps_max):
    """CISPO (ScaleRL): -sg(min(r, eps_max)) * a * logp — REINFORCE with a truncated IS weight."""
    ratio = torch.exp(logp - old_logp).detach()
    weight = ratio.clamp(max=eps_max)
    return -weight * adv * logp, {"ratio": ratio, "clipped": (ratio > eps_max).float()}


def loss_options(loss_type: str, given: dict) -> dict[str, float]:
    """The options `loss_type` runs with: its defaults (trainer.config.LOSS_OPTIONS) overridden
    by the given ones that are not None. An option the type does not take is a ValueError."""
    check_loss_options(loss_type, given)
    return {**LOSS_OPTIONS[loss_type], **{k: v for k, v in given.items() if v is not None}}


@AGGREGATIONS.register("token")
def token_mean(terms, mask, group_ids):
    """All tokens of the batch together."""
    return (terms * mask).sum() / mask.sum().clamp(min=1)


@AGGREGATIONS.register("sample")
def sample_mean(terms, mask, group_ids):
    """Mean over samples of each sample's token mean."""
    per = (terms * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per.mean()


@AGGREGATIONS.register("prompt")
def prompt_mean(terms, mask, group_ids):
    """Mean over prompts of (sum of the group's terms / tokens in the group) — ScaleRL."""
    _, inv = torch.unique(group_ids, return_inverse=True)
    g = int(inv.max()) + 1
    sums = torch.zeros(g, dtype=terms.dtype, device=terms.device).index_add(
        0, inv, (terms * mask).sum(-1))
    counts = torch.zeros(g, dtype=mask.dtype, device=mask.device).index_add(0, inv, mask.sum(-1))
    return (sums / counts.clamp(min=1)).mean()


def policy_loss_with_stats(logp, old_logp, advantages, mask, group_ids, *, loss_type,
                           aggregation, **loss_kwargs):
    """`policy_loss` plus detached stats (importance ratio, clip fraction) for metrics."""
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype)[:, None]
    fn = LOSSES.get(loss_type)
    terms, stats = fn(logp, old_logp, adv, mask, **loss_options(loss_type, loss_kwargs))
    loss = AGGREGATIONS.get(aggregation)(terms, mask, group_ids)
    n = mask.sum().clamp(min=1)
    ratio = stats["ratio"]
    out = {
        "is_ratio_mean": float((ratio * mask).sum() / n),
        "is_ratio_max": float(ratio[mask.bool()].max()) if mask.any() else 1.0,
        "clip_frac": float((stats["clipped"] * mask).sum() / n),
    }
    return loss, out


def policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, group_ids: torch.Tensor, *, loss_type: str,
                aggregation: str, **loss_kwargs) -> torch.Tensor:
    """Scalar policy loss. logp/old_logp/mask [batch, tokens]; advantages, group_ids [batch].

    kwargs: eps_low, eps_high (ppo/dapo/gspo), eps_max (cispo); None or absent = the type's
    default (trainer.config.LOSS_OPTIONS); an option the type does not take is a ValueError.
    """
    return policy_loss_with_stats(logp, old_logp, advantages, mask, group_ids,
                                  loss_type=loss_type, aggregation=aggregation, **loss_kwargs)[0]
