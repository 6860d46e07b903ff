"""Policy losses (`loss.type`: ppo, dapo, gspo, cispo) x aggregations (`loss.aggregation`:
sample, prompt, token), with token-level signatures as in verl's core_algos.

A loss type is one function (logp, old_logp, adv [B, 1], mask, *, <its options>) -> (per-token
terms [B, T], LossStats), registered under the name the YAML uses together with its options
and their defaults (`options=`: the `loss:` keys it takes, checked by `check_loss_options`); an aggregation is one function (terms, mask, group_ids) -> the batch's scalar. They
meet in one place, `policy_loss_and_stats`: each token's term times its weight in the
aggregation (`token_weights`: the aggregation's gradient, exact because every aggregation is
linear), the whole batch's weights when the batch is one micro-batch of it
(trainer/loop/microbatch.py). The config's allowed names and the options' defaults are read
from these registries (trainer/config_parts/loss.py): a new loss or aggregation is its
function and its registration. The math is the contract in docs/losses.md; no KL term and no
critic (ScaleRL).

Importing this module does not import torch (the config imports it, and `ablate` validates
thousands of variants without torch): the functions use tensor methods, and torch itself only
inside the one function that needs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from trainer.registry import Registry

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class LossStats:
    """What every loss type returns beside its terms, per token [B, T], for the step's metrics
    (trainer/loop/update.py: train/is_ratio_mean, is_ratio_max, clip_frac)."""

    ratio: torch.Tensor  # the importance ratio the terms use (gspo: its sequence-level one)
    clipped: torch.Tensor  # 1.0 where clipping or truncation changed the token's term, else 0.0


# (logp, old_logp, adv[B,1], mask, *, <the type's options>) -> (per-token terms [B,T], stats)
TokenLoss = Callable[..., "tuple[torch.Tensor, LossStats]"]
LOSSES: Registry[TokenLoss] = Registry("loss.type")
AGGREGATIONS: Registry[Callable[..., "torch.Tensor"]] = Registry("loss.aggregation")

# Option defaults, from the ScaleRL paper (arXiv 2510.13786) and the papers named: PPO-clip eps 0.2/0.2; DAPO clip-higher raises
# eps_high to 0.28; GSPO's sequence-level ratio needs a clip scale ~1e-3 (1e-4 did not work);
# CISPO's truncation eps_max 4 (4-8 all worked).


def _clipped(ratio, adv, eps_low: float, eps_high: float):
    unclipped = ratio * adv
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high) * adv
    # A token is "clipped" when the clipped branch is the active (smaller) one.
    return -unclipped.minimum(clipped), (clipped < unclipped).float()


@LOSSES.register("ppo", options={"eps_low": 0.2, "eps_high": 0.2})
def ppo(logp, old_logp, adv, mask, *, eps_low, eps_high):
    """GRPO/PPO-clip: per-token -min(r a, clip(r, 1-eps_low, 1+eps_high) a)."""
    ratio = (logp - old_logp).exp()
    terms, clipped = _clipped(ratio, adv, eps_low, eps_high)
    return terms, LossStats(ratio=ratio.detach(), clipped=clipped)


@LOSSES.register("dapo", options={"eps_low": 0.2, "eps_high": 0.28})
def dapo(logp, old_logp, adv, mask, *, eps_low, eps_high):
    """DAPO clip-higher: the PPO term; only its default eps_high is larger."""
    return ppo(logp, old_logp, adv, mask, eps_low=eps_low, eps_high=eps_high)


@LOSSES.register("gspo", options={"eps_low": 1e-3, "eps_high": 1e-3})
def gspo(logp, old_logp, adv, mask, *, eps_low, eps_high):
    """GSPO: one sequence-level ratio s = exp(mean_t(logp - old_logp)) shared by all tokens."""
    n = mask.sum(-1).clamp(min=1)
    s = (((logp - old_logp) * mask).sum(-1) / n).exp()  # [B]
    s_tok = s[:, None].expand_as(logp)
    terms, clipped = _clipped(s_tok, adv, eps_low, eps_high)
    return terms, LossStats(ratio=s_tok.detach(), clipped=clipped)


@LOSSES.register("cispo", options={"eps_max": 4.0})
def cispo(logp, old_logp, adv, mask, *, eps_max):
    """CISPO (ScaleRL): -sg(min(r, eps_max)) * a * logp — REINFORCE with a truncated IS weight."""
    ratio = (logp - old_logp).exp().detach()
    weight = ratio.clamp(max=eps_max)
    return -weight * adv * logp, LossStats(ratio=ratio, clipped=(ratio > eps_max).float())


def loss_option_names() -> list[str]:
    """Every option some loss type takes, in the order registered: the `loss:` keys that are
    options (LossConfig has a field for each); any other key of `loss:` is not one."""
    return list(dict.fromkeys(o for t in LOSSES.names() for o in LOSSES.options(t)))


def check_loss_options(loss_type: str, given) -> None:
    """The one check of a loss type's options (the config's and the loss call's): ValueError
    naming the loss, the options it does not take and the ones it does."""
    valid = LOSSES.options(loss_type) if loss_type in LOSSES.keys() else {}
    unknown = [k for k in given if k not in valid]
    if unknown:
        raise ValueError(f"loss.type {loss_type!r} does not take {', '.join(unknown)}; its "
                         f"options: {', '.join(valid) or 'none'}")


def loss_options(loss_type: str, given: dict) -> dict[str, float]:
    """The options `loss_type` runs with: its registered defaults overridden by the given ones
    that are not None. An option the type does not take is a ValueError."""
    check_loss_options(loss_type, given)
    return {**LOSSES.options(loss_type), **{k: v for k, v in given.items() if v is not None}}


@AGGREGATIONS.register("sample")
def sample_mean(terms, mask, group_ids):
    """Mean over samples of each sample's token mean."""
    per = (terms * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per.mean()


@AGGREGATIONS.register("prompt")
def prompt_mean(terms, mask, group_ids):
    """Mean over prompts of (sum of the group's terms / tokens in the group) — ScaleRL."""
    _, inv = group_ids.unique(return_inverse=True)
    g = int(inv.max()) + 1
    sums = terms.new_zeros(g).index_add(0, inv, (terms * mask).sum(-1))
    counts = mask.new_zeros(g).index_add(0, inv, mask.sum(-1))
    return (sums / counts.clamp(min=1)).mean()


@AGGREGATIONS.register("token")
def token_mean(terms, mask, group_ids):
    """All tokens of the batch together."""
    return (terms * mask).sum() / mask.sum().clamp(min=1)


def token_weights(aggregation: str, mask: "torch.Tensor", group: "torch.Tensor") -> "torch.Tensor":
    """W [B, T]: the weight of each completion token in the whole batch's aggregated loss.

    Read as the gradient of the registered aggregation with respect to the per-token terms
    (exact for a linear aggregation, which all of them are), so the loss uses the very
    function `loss.aggregation` names, with the whole batch's denominators even when it is
    computed one micro-batch at a time (trainer/loop/microbatch.py rows_token_weights)."""
    import torch  # here: importing this module must not import torch (see the module doc)

    probe = torch.zeros(mask.shape, dtype=torch.float64, requires_grad=True)
    total = AGGREGATIONS.get(aggregation)(probe, mask.to(torch.float64), group)
    (w,) = torch.autograd.grad(total, probe)
    return w


def policy_loss_and_stats(logp, old_logp, advantages, mask, weight, *, loss_type: str,
                          **options) -> tuple["torch.Tensor", LossStats]:
    """The policy loss of these rows and the loss type's per-token stats (importance ratio,
    clipped): the type's per-token terms, each times its `weight` in the aggregation
    (token_weights; for one micro-batch, its rows of the whole batch's weights). logp /
    old_logp / mask / weight [B, T], advantages [B]. Options: eps_low, eps_high (ppo, dapo,
    gspo), eps_max (cispo); None or absent = the type's default; one the type does not take
    is a ValueError."""
    mask = mask.to(logp.dtype)
    terms, stats = LOSSES.get(loss_type)(logp, old_logp, advantages.to(logp.dtype)[:, None],
                                         mask, **loss_options(loss_type, options))
    return (terms * weight.to(logp.dtype)).sum(), stats


def policy_loss(logp, old_logp, advantages, mask, group_ids, *, loss_type: str,
                aggregation: str, **options) -> "torch.Tensor":
    """The scalar policy loss of one whole batch (its own aggregation weights): what the
    trainer's micro-batched loss sums to. group_ids [B]: the prompt of each row."""
    weight = token_weights(aggregation, mask, group_ids)
    return policy_loss_and_stats(logp, old_logp, advantages, mask, weight,
                                 loss_type=loss_type, **options)[0]
