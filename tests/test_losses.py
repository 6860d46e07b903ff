"""Every loss type x aggregation against values computed by hand (see the comments)."""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from trainer.config import LossConfig
from trainer.algo.losses import AGGREGATIONS, LOSSES, policy_loss

# Three samples: 0 and 1 from prompt 0, sample 2 from prompt 1; sample 1's last token is padding.
R = [[1.5, 0.5, 1.0], [1.1, 0.9, 2.0], [1.0, 3.0, 0.7]]  # importance ratios r per token
LOGP = [[-1.0, -2.0, -0.5], [-0.5, -1.0, -3.0], [-2.0, -0.25, -1.0]]
MASK = [[1, 1, 1], [1, 1, 0], [1, 1, 1]]
ADV = [1.0, -1.0, 2.0]
GROUPS = [0, 0, 1]

# Per-sample (sum of l, token count) worked out by hand from the docs/losses.md formulas:
#  ppo eps .2/.2:   s0: -1.2 -0.5 -1.0 = -2.7 | s1: +1.1 +0.9 = 2.0 | s2: -2 -2.4 -1.4 = -5.8
#  dapo eps .2/.28: s0: -1.28 -0.5 -1.0 = -2.78 | s1: 2.0 | s2: -2 -2.56 -1.4 = -5.96
#  gspo eps .2/.2:  s = (prod r)^(1/n): s0 .75^(1/3)=.908560 -> 3 x -.908560; s1 .99^(1/2)=.994987
#                   (a=-1) -> 2 x +.994987; s2 2.1^(1/3)=1.28058 > 1.2 -> 3 x -(1.2*2)
#  cispo eps_max 2: l = -min(r,2) a logp: s0 1.5+1.0+.5 = 3.0 | s1 -.55-.9 = -1.45 |
#                   s2 4.0+1.0+1.4 = 6.4
SUMS = {
    "ppo": ([-2.7, 2.0, -5.8], {}),
    "dapo": ([-2.78, 2.0, -5.96], {}),
    "gspo": ([-3 * 0.75 ** (1 / 3), 2 * 0.99 ** 0.5, -7.2], {"eps_low": 0.2, "eps_high": 0.2}),
    "cispo": ([3.0, -1.45, 6.4], {"eps_max": 2.0}),
}
COUNTS = [3, 2, 3]


def expected(loss_type: str, agg: str) -> float:
    s, _ = SUMS[loss_type]
    if agg == "token":
        return sum(s) / sum(COUNTS)
    if agg == "sample":
        return sum(si / ni for si, ni in zip(s, COUNTS)) / 3
    return ((s[0] + s[1]) / (COUNTS[0] + COUNTS[1]) + s[2] / COUNTS[2]) / 2  # prompt


def tensors(requires_grad: bool = False):
    logp = torch.tensor(LOGP, dtype=torch.float64, requires_grad=requires_grad)
    old = logp.detach() - torch.log(torch.tensor(R, dtype=torch.float64))
    return logp, old, torch.tensor(ADV), torch.tensor(MASK), torch.tensor(GROUPS)


@pytest.mark.parametrize("agg", ["token", "sample", "prompt"])
@pytest.mark.parametrize("loss_type", ["ppo", "dapo", "gspo", "cispo"])
def test_loss_matches_hand_computed(loss_type, agg):
    logp, old, adv, mask, groups = tensors()
    got = policy_loss(logp, old, adv, mask, groups, loss_type=loss_type, aggregation=agg,
                      **SUMS[loss_type][1])
    assert float(got) == pytest.approx(expected(loss_type, agg), abs=1e-5)


def test_hand_values_spot_check():
    # Independent of the helper above: ppo/token = (-2.7 + 2.0 - 5.8) / 8.
    logp, old, adv, mask, groups = tensors()
    assert float(policy_loss(logp, old, adv, mask, groups, loss_type="ppo",
                             aggregation="token")) == pytest.approx(-0.8125)
    assert float(policy_loss(logp, old, adv, mask, groups, loss_type="cispo", aggregation="prompt",
                             eps_max=2.0)) == pytest.approx(((3.0 - 1.45) / 5 + 6.4 / 3) / 2)


def test_cispo_gradient_is_truncated_weight_times_advantage():
    logp, old, adv, mask, groups = tensors(requires_grad=True)
    policy_loss(logp, old, adv, mask, groups, loss_type="cispo", aggregation="token",
                eps_max=2.0).backward()
    # d/dlogp of -sg(min(r, 2)) a logp / 8 tokens: the weight is a constant (stop-gradient).
    assert float(logp.grad[0, 0]) == pytest.approx(-1.5 * 1.0 / 8)
    assert float(logp.grad[2, 1]) == pytest.approx(-2.0 * 2.0 / 8)  # r=3 truncated at 2
    assert float(logp.grad[1, 2]) == 0.0  # padding


def test_ppo_clipped_tokens_get_no_gradient():
    logp, old, adv, mask, groups = tensors(requires_grad=True)
    policy_loss(logp, old, adv, mask, groups, loss_type="ppo", aggregation="token").backward()
    assert float(logp.grad[0, 0]) == 0.0  # r=1.5 > 1.2 with a > 0: clipped
    assert float(logp.grad[2, 1]) == 0.0  # r=3.0 clipped
    assert float(logp.grad[0, 1]) == pytest.approx(-0.5 / 8)  # r=.5, a>0: unclipped branch r*a


def test_gspo_default_clip_is_tiny():
    # Defaults (1e-3 / 1e-3) clip any sequence ratio away from 1 by more than that.
    logp, old, adv, mask, groups = tensors()
    got = policy_loss(logp, old, adv, mask, groups, loss_type="gspo", aggregation="sample")
    s = [0.75 ** (1 / 3), 0.99 ** 0.5, 2.1 ** (1 / 3)]
    per = [-min(s[0] * 1, max(min(s[0], 1.001), 0.999) * 1),
           -min(-s[1], -max(min(s[1], 1.001), 0.999)),
           -min(2 * s[2], 2 * 1.001)]
    assert float(got) == pytest.approx(sum(per) / 3, abs=1e-6)


def test_defaults_come_from_the_one_table():
    # None (or absent) takes the registered default; the field docs quote the same table.
    logp, old, adv, mask, groups = tensors()
    for loss_type in LOSSES.names():
        opts = LOSSES.options(loss_type)
        assert float(policy_loss(logp, old, adv, mask, groups, loss_type=loss_type,
                                 aggregation="token", **opts)) == \
            float(policy_loss(logp, old, adv, mask, groups, loss_type=loss_type,
                              aggregation="token", **{k: None for k in opts}))
    assert "dapo 0.28" in LossConfig.model_fields["eps_high"].description
    assert "cispo 4" in LossConfig.model_fields["eps_max"].description


def test_a_loss_rejects_an_option_it_does_not_take():
    logp, old, adv, mask, groups = tensors()
    with pytest.raises(ValueError, match=r"loss.type 'ppo' does not take eps_max; its options: "
                                         r"eps_low, eps_high"):
        policy_loss(logp, old, adv, mask, groups, loss_type="ppo", aggregation="token",
                    eps_max=4.0)
    with pytest.raises(ValueError, match="loss.type 'cispo' does not take eps_low"):
        policy_loss(logp, old, adv, mask, groups, loss_type="cispo", aggregation="token",
                    eps_low=0.2)
    # Caught when the config is validated, before anything trains.
    with pytest.raises(ValidationError, match="loss.type 'ppo' does not take eps_max"):
        LossConfig(type="ppo", eps_max=8.0)
    with pytest.raises(ValidationError, match="loss.type 'cispo' does not take eps_high"):
        LossConfig(eps_high=0.3)
    assert LossConfig(type="gspo", eps_low=1e-3).eps_high is None


def test_registries_cover_the_names():
    assert LOSSES.keys() == ["cispo", "dapo", "gspo", "ppo"]
    assert {t: LOSSES.options(t) for t in LOSSES.keys()} == {
        "cispo": {"eps_max": 4.0}, "dapo": {"eps_low": 0.2, "eps_high": 0.28},
        "gspo": {"eps_low": 1e-3, "eps_high": 1e-3}, "ppo": {"eps_low": 0.2, "eps_high": 0.2}}
    assert AGGREGATIONS.keys() == ["prompt", "sample", "token"]
    assert math.isfinite(expected("ppo", "token"))


def test_only_registered_options_are_options():
    """Which `loss:` keys are options is the registry's: a new plain setting under `loss:`
    with a default breaks no loss type, and every option some type takes can be set."""
    from pydantic import Field

    from trainer.algo.losses import loss_option_names

    assert set(loss_option_names()) <= set(LossConfig.model_fields), loss_option_names()

    class WithSetting(LossConfig):
        log_every: int = Field(3)

    for loss_type in LOSSES.names():
        assert WithSetting(type=loss_type).log_every == 3


def test_every_loss_returns_its_stats_typed():
    """update.py reads each loss type's ratio and clipped flags (train/is_ratio_*, clip_frac)."""
    from trainer.algo.losses import LossStats, loss_options

    logp, old, adv, mask, _ = tensors()
    for loss_type in LOSSES.names():
        terms, stats = LOSSES.get(loss_type)(logp, old, adv[:, None], mask,
                                            **loss_options(loss_type, {}))
        assert isinstance(stats, LossStats), loss_type
        assert stats.ratio.shape == stats.clipped.shape == terms.shape, loss_type
