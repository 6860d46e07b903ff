"""Every recipe axis value changes what the trainer does, checked against hand-written oracles.

Two kinds of test per axis:
  * a tiny tensor example whose expected numbers are worked out by hand in the test (not by
    calling the code under test twice): two values of the axis give different results, and each
    gives the number its formula (docs/losses.md; the ScaleRL paper, arXiv 2510.13786) says;
  * a real run of the loop (`trainer.run`) on a very small warmed proxy, with the axis' registry
    spied on (`Registry.get` wrapped, implementations untouched): the loop asks for the value the
    config names and nothing else, and what the implementation returned on the loop's own data
    matches the same formula recomputed here in numpy.

Axes (the registries trainer/config_parts/ reads their names from, and the study YAMLs in
recipes/): loss.type, loss.aggregation, advantage.normalization, data.zero_variance_filter,
data.no_positive_resampling, data.curriculum, precision.*_lm_head_fp32, off_policy.mode / k,
length.control.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pytest
import torch

from _trainer_util import config, merge, metrics

import trainer
from trainer.algo.advantages import NORMALIZATIONS, compute_advantages
from trainer.algo.length import CONTROLS
from trainer.algo.losses import AGGREGATIONS, LOSSES, policy_loss
from trainer.torch_axes import MODES
from trainer.algo.pool import CURRICULA

# A proxy small enough to warm up in seconds: 1-digit addition, one 32-wide layer. Every test
# shares its model and task (the warmed model is cached by both), only RL settings vary.
N_TRAIN = 60
MINI = {
    "seed": 0,
    "model": {"proxy": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "intermediate_size": 64,
                        "max_position_embeddings": 16, "warmup_target": 0.35, "warmup_band": 0.1,
                        "warmup_eval_prompts": 40, "warmup_lr": 1e-2, "warmup_batch_size": 32}},
    "precision": {"dtype": "fp32", "generator_lm_head_fp32": True, "trainer_lm_head_fp32": True},
    "task": {"name": "arithmetic", "digits": 1, "num_train_prompts": N_TRAIN, "num_eval_prompts": 40},
    "rollout": {"backend": "hf", "prompts_per_step": 8, "generations_per_prompt": 4,
                "max_new_tokens": 3},
    "length": {"control": "none"},
    "loss": {"type": "cispo", "aggregation": "prompt"},
    "advantage": {"normalization": "batch"},
    "data": {"zero_variance_filter": False, "no_positive_resampling": False, "curriculum": "none"},
    "off_policy": {"mode": "ppo_off_policy", "k": 1},  # no generator thread: deterministic
    "optim": {"lr": 1e-2, "warmup_steps": 0},
    "engine": {"type": "torch", "device": "cpu", "threads": 1},
    "eval": {"every_steps": 2, "num_prompts": 8, "samples_per_prompt": 1},
    "budget": {"steps": 2},
    "checkpoint": {"every_steps": 2},
}

# Clip ranges as the paper states them (arXiv 2510.13786): PPO 0.2/0.2, DAPO clip-higher 0.2/0.28,
# GSPO ~1e-3, CISPO eps_max 4.
EPS = {"ppo": (0.2, 0.2), "dapo": (0.2, 0.28), "gspo": (1e-3, 1e-3)}
EPS_MAX = 4.0


@pytest.fixture(scope="module")
def vocab():
    """Warm the mini proxy once (cached on disk by its config); its LM head's output size."""
    from trainer.policy import load_model

    torch.set_num_threads(1)
    model, _ = load_model(config(merge(MINI, {})))
    return model.get_output_embeddings().weight.shape[0]


def run_loop(tmp_path, name, vocab, **over) -> list[dict]:
    d = tmp_path / name
    trainer.run(config(merge(MINI, over)), d)
    return metrics(d)


@contextmanager
def spy(monkeypatch, registry, snapshot=None):
    """Record every implementation the loop takes from `registry`: (name, args, kwargs, result),
    plus `snapshot(*args)` taken at call time when given (for arguments the loop mutates later)."""
    calls: list[tuple] = []
    real_get = registry.get

    def get(name):
        fn = real_get(name)

        def wrapped(*args, **kwargs):
            out = fn(*args, **kwargs)
            calls.append((name, args, kwargs, out) + ((snapshot(*args),) if snapshot else ()))
            return out

        return wrapped

    monkeypatch.setattr(registry, "get", get)
    yield calls


def np64(t) -> np.ndarray:
    return t.detach().double().cpu().numpy()


# -- hand oracles (numpy, from the formulas in docs/losses.md) ----------------------------------------


def hand_terms(kind: str, logp, old, adv, mask) -> np.ndarray:
    a = adv.reshape(-1, 1)
    if kind == "cispo":
        return -np.minimum(np.exp(logp - old), EPS_MAX) * a * logp
    if kind == "gspo":
        s = np.exp(((logp - old) * mask).sum(1) / np.maximum(mask.sum(1), 1))[:, None]
        r = np.broadcast_to(s, logp.shape)
    else:
        r = np.exp(logp - old)
    lo, hi = EPS[kind]
    return -np.minimum(r * a, np.clip(r, 1 - lo, 1 + hi) * a)


def hand_aggregate(kind: str, terms, mask, groups) -> float:
    lm = terms * mask
    if kind == "token":
        return lm.sum() / mask.sum()
    if kind == "sample":
        return float(np.mean(lm.sum(1) / np.maximum(mask.sum(1), 1)))
    per = [lm[groups == g].sum() / mask[groups == g].sum() for g in np.unique(groups)]
    return float(np.mean(per))


def hand_advantages(kind: str, rewards, groups, eps=1e-6) -> np.ndarray:
    adv = rewards.astype(float).copy()
    for g in np.unique(groups):
        adv[groups == g] -= rewards[groups == g].mean()
    if kind == "prompt":
        for g in np.unique(groups):
            sel = groups == g
            adv[sel] /= (adv[sel].std(ddof=1) if sel.sum() > 1 else 0.0) + eps
    elif kind == "batch":
        adv /= adv.std(ddof=1) + eps
    return adv


# -- loss.type -------------------------------------------------------------------------------


# old log-probs 0, so r = exp(logp). Sample 0 (advantage +1): r 1.25, 0.5, 1.5; sample 1
# (advantage -1): r 1.1, 0.9, 1.0. Token aggregation: every term weighs 1/6. Gradients w.r.t. logp:
#   ppo   s0: 1.25 > 1.2 clipped -> 0; 0.5 unclipped -> -0.5/6; 1.5 clipped -> 0
#         s1: all inside [0.8, 1.2] -> d(r)/dlogp = r: 1.1/6, 0.9/6, 1.0/6
#   dapo  s0: 1.25 <= 1.28 now unclipped -> -1.25/6; -0.5/6; 1.5 > 1.28 clipped -> 0; s1 as ppo
#   cispo -sg(min(r, 4)) a: s0 -1.25/6, -0.5/6, -1.5/6; s1 1.1/6, 0.9/6, 1.0/6
#   gspo  s0: s = (1.25*0.5*1.5)^(1/3) = 0.978722 < 0.999 unclipped; all 3 tokens carry -s/6 and
#         ds/dlogp_t = s/3, so each logp_t gets 3 * -(s/3)/6 = -s/6 = -0.163120
#         s1: s = 0.99^(1/3) = 0.996655, a = -1: clip(s) a = -0.999 < -s a -> clipped -> 0
HAND_GRAD = {
    "ppo": [[0, -0.5 / 6, 0], [1.1 / 6, 0.9 / 6, 1.0 / 6]],
    "dapo": [[-1.25 / 6, -0.5 / 6, 0], [1.1 / 6, 0.9 / 6, 1.0 / 6]],
    "cispo": [[-1.25 / 6, -0.5 / 6, -1.5 / 6], [1.1 / 6, 0.9 / 6, 1.0 / 6]],
    "gspo": [[-0.163120] * 3, [0, 0, 0]],
}


def _grad(loss_type: str, aggregation: str, r, adv, mask, groups) -> np.ndarray:
    logp = torch.log(torch.tensor(r, dtype=torch.float64)).requires_grad_(True)
    loss = policy_loss(logp, torch.zeros_like(logp), torch.tensor(adv, dtype=torch.float64),
                       torch.tensor(mask, dtype=torch.float64), torch.tensor(groups),
                       loss_type=loss_type, aggregation=aggregation)
    loss.backward()
    return logp.grad.numpy()


def test_loss_types_give_their_hand_computed_gradients():
    r = [[1.25, 0.5, 1.5], [1.1, 0.9, 1.0]]
    grads = {t: _grad(t, "token", r, [1.0, -1.0], [[1, 1, 1], [1, 1, 1]], [0, 1])
             for t in LOSSES.keys()}
    assert set(grads) == set(HAND_GRAD)  # every registered type has its hand oracle
    for t, g in grads.items():
        np.testing.assert_allclose(g, HAND_GRAD[t], atol=1e-6, err_msg=t)
    names = sorted(grads)
    for i, a in enumerate(names):  # and the four types really differ on this batch
        for b in names[i + 1:]:
            assert not np.allclose(grads[a], grads[b]), (a, b)


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["ppo", "dapo", "gspo", "cispo"])
def test_loop_uses_the_configured_loss_type(tmp_path, monkeypatch, vocab, loss_type):
    with spy(monkeypatch, LOSSES) as calls:
        run_loop(tmp_path, loss_type, vocab, loss={"type": loss_type})
    assert calls and {c[0] for c in calls} == {loss_type}
    for _, (logp, old, adv, mask), _, (terms, _) in calls:
        want = hand_terms(loss_type, np64(logp), np64(old), np64(adv), np64(mask))
        np.testing.assert_allclose(np64(terms) * np64(mask), want * np64(mask), atol=1e-5)


# -- loss.aggregation --------------------------------------------------------------------------

# CISPO with r = 1 and advantage -1 makes every per-token term equal logp, so the gradient is the
# per-token weight. Samples of 1, 3 and 2 tokens; samples 0, 1 are prompt 0, sample 2 prompt 1.
MASK = [[1, 0, 0], [1, 1, 1], [1, 1, 0]]
HAND_WEIGHTS = {
    "token": [[1 / 6, 0, 0], [1 / 6] * 3, [1 / 6, 1 / 6, 0]],  # 6 tokens in the batch
    "sample": [[1 / 3, 0, 0], [1 / 9] * 3, [1 / 6, 1 / 6, 0]],  # 1/(3 samples * length)
    "prompt": [[1 / 8, 0, 0], [1 / 8] * 3, [1 / 4, 1 / 4, 0]],  # 1/(2 prompts * group tokens)
}


def test_aggregations_weight_tokens_as_hand_computed():
    assert set(AGGREGATIONS.keys()) == set(HAND_WEIGHTS)
    for agg, want in HAND_WEIGHTS.items():
        logp = torch.full((3, 3), -0.7, dtype=torch.float64, requires_grad=True)
        loss = policy_loss(logp, logp.detach(), torch.full((3,), -1.0, dtype=torch.float64),
                           torch.tensor(MASK, dtype=torch.float64), torch.tensor([0, 0, 1]),
                           loss_type="cispo", aggregation=agg)
        loss.backward()
        np.testing.assert_allclose(logp.grad.numpy(), want, atol=1e-12, err_msg=agg)


@pytest.mark.parametrize("aggregation", ["sample", "prompt", "token"])
def test_loop_uses_the_configured_aggregation(tmp_path, monkeypatch, vocab, aggregation):
    with spy(monkeypatch, AGGREGATIONS) as calls:
        run_loop(tmp_path, aggregation, vocab, loss={"aggregation": aggregation})
    assert calls and {c[0] for c in calls} == {aggregation}
    for _, (terms, mask, groups), _, loss in calls:
        want = hand_aggregate(aggregation, np64(terms), np64(mask), groups.cpu().numpy())
        assert float(loss.detach()) == pytest.approx(want, rel=1e-5, abs=1e-7)


# -- advantage.normalization -------------------------------------------------------------------

# Rewards +1/-1 in three prompts of two samples: centred [1, -1, 1, -1, 0, 0].
#   none:   as centred
#   prompt: / each group's std (ddof 1): sqrt(2) -> +-0.707107; the uniform group stays 0
#   batch:  / std of all six (ddof 1): sqrt(4/5) = 0.894427 -> +-1.118034
HAND_ADV = {
    "none": [1, -1, 1, -1, 0, 0],
    "prompt": [0.707107, -0.707107, 0.707107, -0.707107, 0, 0],
    "batch": [1.118034, -1.118034, 1.118034, -1.118034, 0, 0],
}


def test_normalizations_give_hand_computed_advantages():
    assert set(NORMALIZATIONS.keys()) == set(HAND_ADV)
    r, g = torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1, 2, 2])
    for kind, want in HAND_ADV.items():
        np.testing.assert_allclose(compute_advantages(r, g, normalization=kind).numpy(), want,
                                   atol=1e-5, err_msg=kind)


@pytest.mark.parametrize("normalization", ["prompt", "batch", "none"])
def test_loop_uses_the_configured_normalization(tmp_path, monkeypatch, vocab, normalization):
    with spy(monkeypatch, NORMALIZATIONS) as calls, spy(monkeypatch, LOSSES) as losses:
        run_loop(tmp_path, normalization, vocab, advantage={"normalization": normalization})
    assert calls and {c[0] for c in calls} == {normalization}
    assert len(calls) == len(losses)  # one advantage computation per loss computation
    for (_, (rewards, groups, eps), _, adv), (_, (_, _, loss_adv, _), _, _) in zip(calls, losses):
        want = hand_advantages(normalization, np64(rewards), groups.cpu().numpy(), eps)
        np.testing.assert_allclose(np64(adv), want, atol=1e-6)
        # ... and those are the advantages the loss was given, sample by sample
        np.testing.assert_allclose(np64(loss_adv).ravel(), want, atol=1e-5)


# -- data.zero_variance_filter ----------------------------------------------------------------


def _groups_of(rewards: np.ndarray, groups: np.ndarray) -> list[tuple]:
    return [tuple(rewards[groups == g]) for g in np.unique(groups)]


def test_zero_variance_filter_drops_exactly_the_uniform_groups(tmp_path, monkeypatch, vocab):
    seen = {}
    for on in (False, True):
        with spy(monkeypatch, NORMALIZATIONS) as calls:
            rows = run_loop(tmp_path, f"zvf-{on}", vocab, data={"zero_variance_filter": on},
                            budget={"steps": 1})
        seen[on] = (calls, rows[-1]["data/zero_variance_dropped"])
    (full_calls, dropped_off), (kept_calls, dropped_on) = seen[False], seen[True]
    # Same seed, same first batch. Without the filter the loop trains on all 8 groups of 4.
    full = _groups_of(np64(full_calls[0][1][0]), full_calls[0][1][1].numpy())
    assert len(full) == 8 and dropped_off == 0
    uniform = [g for g in full if len(set(g)) == 1]
    assert uniform, "the test batch needs at least one uniform group"
    # With it, the uniform groups (and only they) are gone.
    kept = _groups_of(np64(kept_calls[0][1][0]), kept_calls[0][1][1].numpy())
    assert kept == [g for g in full if len(set(g)) > 1]
    assert dropped_on == len(uniform)


# -- data.no_positive_resampling and data.curriculum (the prompt pool) -------------------------

SMALL_POOL = {"rollout": {"prompts_per_step": 20}, "budget": {"steps": 4}}  # epoch = 3 steps


def _pool_now(pool, _rng) -> tuple[list, list]:
    """Pass rate of every prompt (None: never drawn) and difficulties, as the pool is now."""
    rates = [pool.correct[i] / pool.seen[i] if pool.seen[i] else None
             for i in range(len(pool.difficulty))]
    return rates, list(pool.difficulty)


def _epochs(calls) -> list[tuple]:
    """Per new epoch: (order returned, pass rates when it was made, difficulties)."""
    return [(list(order), *now) for _, _, _, order, now in calls]


@pytest.mark.parametrize("npr", [True, False])
def test_no_positive_resampling_retires_prompts_at_0_9(tmp_path, monkeypatch, vocab, npr):
    with spy(monkeypatch, CURRICULA, _pool_now) as calls:
        rows = run_loop(tmp_path, f"npr-{npr}", vocab, **SMALL_POOL,
                        data={"no_positive_resampling": npr, "npr_threshold": 0.9})
    epochs = _epochs(calls)
    assert len(epochs) >= 2  # a second epoch began
    order, rates, _ = epochs[1]
    solved = {i for i, p in enumerate(rates) if p is not None and p >= 0.9}
    assert solved, "the test needs a prompt solved in the first epoch"
    want = set(range(N_TRAIN)) - solved if npr else set(range(N_TRAIN))
    assert set(order) == want and len(order) == len(want)
    assert (rows[-1]["data/npr_retired"] > 0) == npr


@pytest.mark.parametrize("curriculum", ["none", "easy_to_hard", "pass_rate"])
def test_curriculum_orders_each_epoch_as_named(tmp_path, monkeypatch, vocab, curriculum):
    with spy(monkeypatch, CURRICULA, _pool_now) as calls:
        run_loop(tmp_path, curriculum, vocab, **SMALL_POOL, data={"curriculum": curriculum})
    assert calls and {c[0] for c in calls} == {curriculum}
    epochs = _epochs(calls)
    first, _, difficulty = epochs[0]
    second, rates, _ = epochs[1]
    assert sorted(first) == list(range(N_TRAIN))  # every epoch is a permutation of the pool
    by_difficulty = [difficulty[i] for i in first]
    by_rate = [-(0.5 if rates[i] is None else rates[i]) for i in second]
    if curriculum == "easy_to_hard":
        assert by_difficulty == sorted(by_difficulty) and len(set(by_difficulty)) > 1
    elif curriculum == "pass_rate":  # highest measured pass rate first, unseen as 0.5
        assert by_rate == sorted(by_rate) and len(set(by_rate)) > 1
    else:  # shuffled: neither order (with 60 prompts, a sorted shuffle is a 1-in-many event)
        assert by_difficulty != sorted(by_difficulty) and by_rate != sorted(by_rate)
        assert first != second


# -- precision: the LM head's dtype in generator and trainer ----------------------------------


def _head_dtypes(monkeypatch, vocab, fn) -> dict[str, set]:
    """dtype of every LM-head projection (output size = vocab) while fn runs, split into
    trainer (grad enabled) and generator/eval (no grad)."""
    seen = {"trainer": set(), "generator": set()}
    real = torch.nn.functional.linear

    def linear(x, w, b=None):
        out = real(x, w, b)
        if w.shape[0] == vocab:
            seen["trainer" if torch.is_grad_enabled() else "generator"].add(out.dtype)
        return out

    monkeypatch.setattr(torch.nn.functional, "linear", linear)
    fn()
    monkeypatch.undo()
    return seen


@pytest.mark.parametrize("gen_fp32, train_fp32", [(True, True), (False, False), (True, False)])
def test_lm_head_precision_flags_set_the_head_dtype(tmp_path, monkeypatch, vocab, gen_fp32,
                                                     train_fp32):
    over = {"precision": {"dtype": "bf16", "generator_lm_head_fp32": gen_fp32,
                          "trainer_lm_head_fp32": train_fp32}}
    seen = _head_dtypes(monkeypatch, vocab,
                        lambda: run_loop(tmp_path, f"prec-{gen_fp32}-{train_fp32}", vocab, **over))
    f32, bf16 = torch.float32, torch.bfloat16
    assert seen["generator"] == {f32 if gen_fp32 else bf16}
    assert seen["trainer"] == {f32 if train_fp32 else bf16}


def test_lm_head_flags_do_nothing_when_the_body_is_fp32(tmp_path, monkeypatch, vocab):
    # precision.dtype fp32 (recipes/proxy.yaml): no autocast, so the head is fp32 either way.
    over = {"precision": {"dtype": "fp32", "generator_lm_head_fp32": False,
                          "trainer_lm_head_fp32": False}}
    seen = _head_dtypes(monkeypatch, vocab, lambda: run_loop(tmp_path, "prec-fp32", vocab, **over))
    assert seen == {"trainer": {torch.float32}, "generator": {torch.float32}}


# -- off_policy.mode / k -----------------------------------------------------------------------


def _max_shift(call) -> float:
    """Largest |logp - old_logp| over the loss tokens of one loss call (0 = on-policy)."""
    _, (logp, old, _, mask), _, _ = call
    return float(((logp - old).abs() * mask).max().detach())


def test_ppo_off_policy_k_makes_later_minibatches_stale(tmp_path, monkeypatch, vocab):
    shifts = {}
    for k in (1, 2):
        with spy(monkeypatch, LOSSES) as calls:
            run_loop(tmp_path, f"k{k}", vocab, off_policy={"mode": "ppo_off_policy", "k": k})
        shifts[k] = [_max_shift(c) for c in calls]
    # k=1: every step trains on data the current weights generated (ratio 1 up to rounding).
    assert max(shifts[1]) < 1e-4, shifts
    # k=2: step 2 trains on the second half of a batch generated before step 1's update.
    assert shifts[2][0] < 1e-4 < 1e-2 < shifts[2][1], shifts


@pytest.mark.parametrize("mode", ["pipeline", "ppo_off_policy"])
def test_off_policy_mode_picks_the_source(tmp_path, monkeypatch, vocab, mode):
    with spy(monkeypatch, MODES) as calls:
        rows = run_loop(tmp_path, mode, vocab, off_policy={"mode": mode, "k": 2})
    assert [c[0] for c in calls] == [mode]
    # Only the pipeline refuses data older than k steps and waits for fresher data.
    assert ("pipeline/stale_dropped" in rows[-1]) == (mode == "pipeline")
    assert ("pipeline/wait_s" in rows[-1]) == (mode == "pipeline")


# -- length.control ----------------------------------------------------------------------------


def _penalty(length: int, l_max: int = 3, l_cache: int = 2) -> float:
    """DAPO overlong penalty (arXiv 2503.14476): clip((L_max - |y|) / L_cache - 1, -1, 0)."""
    return min(0.0, max(-1.0, (l_max - length) / l_cache - 1))


@pytest.mark.parametrize("control", ["none", "overlong_penalty"])
def test_overlong_penalty_is_added_to_the_reward(tmp_path, monkeypatch, vocab, control):
    over = {"length": {"control": control, "overlong_max": 3, "overlong_cache": 2}}
    with spy(monkeypatch, NORMALIZATIONS) as norms, spy(monkeypatch, LOSSES) as losses:
        run_loop(tmp_path, control, vocab, **over)
    penalties = []
    for (_, (rewards, _, _), _, _), (_, (_, _, _, mask), _, _) in zip(norms, losses):
        lengths = np64(mask).sum(1).astype(int)  # no interruption: every token is in the loss
        pen = np.array([_penalty(n) if control == "overlong_penalty" else 0.0 for n in lengths])
        base = np64(rewards) - pen
        assert set(np.round(base, 9)) <= {1.0, -1.0}  # what is left is the +1/-1 reward
        penalties += list(pen)
    assert any(p < 0 for p in penalties) == (control == "overlong_penalty")


@pytest.mark.parametrize("control", ["none", "interrupt"])
def test_interruption_text_is_inserted_and_masked(tmp_path, monkeypatch, vocab, control):
    over = {"length": {"control": control, "thinking_budget": 1, "budget_min_fraction": 1.0,
                       "answer_budget": 2, "interrupt_text": "=>"}}
    with spy(monkeypatch, CONTROLS) as ctl, spy(monkeypatch, LOSSES) as losses:
        run_loop(tmp_path, f"len-{control}", vocab, **over)
    assert {c[0] for c in ctl} == {control}

    def masked_then_trained(row) -> bool:  # a 0 (not the policy's token) followed by a 1
        s = "".join(str(int(v)) for v in row)
        return "01" in s

    rows = [r for c in losses for r in np64(c[1][3])]
    inner_gaps = [r for r in rows if masked_then_trained(r)]
    if control == "interrupt":
        # budget 1 token: every sample still thinking gets "=>" (2 tokens, masked) then answers
        assert inner_gaps and all("1001" in "".join(str(int(v)) for v in r) for r in inner_gaps)
    else:
        assert not inner_gaps


def test_every_config_axis_value_is_covered_here():
    """The Literals the study YAMLs choose from are exactly the values tested above."""
    import typing

    from trainer import config as C

    def lit(model, field):
        return set(typing.get_args(model.model_fields[field].annotation))

    assert lit(C.LossConfig, "type") == set(HAND_GRAD)
    assert lit(C.LossConfig, "aggregation") == set(HAND_WEIGHTS)
    assert lit(C.AdvantageConfig, "normalization") == set(HAND_ADV)
    assert lit(C.DataConfig, "curriculum") == {"none", "easy_to_hard", "pass_rate"}
    assert lit(C.OffPolicyConfig, "mode") == {"pipeline", "ppo_off_policy"}
    assert lit(C.LengthConfig, "control") == {"none", "overlong_penalty", "interrupt"}
