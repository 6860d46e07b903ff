"""Trainer pieces for scale, single process on CPU: gradient checkpointing really on during the
update (same step as without it), chat-template prompts through the loop, and the data-parallel
loss weighting (ranks' weighted shard losses average to the whole batch's loss)."""

from __future__ import annotations

import shutil

import pytest
import torch
from _trainer_util import config, tiny

from trainer.loop.train import _Run
from trainer.algo.losses import policy_loss
from trainer.generation.offpolicy import MODES
from trainer.loop.update import shard_groups, shard_weight


def _one_step(cfg, run_dir):
    torch.manual_seed(0)
    run = _Run(cfg, run_dir)
    calls = []
    for layer in run.model.get_decoder().layers:  # count real checkpointed layer calls
        f = getattr(layer, "_gradient_checkpointing_func", None)
        if f is not None:
            layer._gradient_checkpointing_func = (
                lambda *a, _f=f, **k: calls.append(1) or _f(*a, **k))
    source = MODES.get(cfg.off_policy.mode)(run.ctx)
    source.after_step(run.model, 0)  # as the loop does: stamp the generator before next()
    try:
        run.train_step(source.next(0))
    finally:
        source.close()
    params = torch.cat([p.detach().reshape(-1) for p in run.model.parameters()])
    return run, params, len(calls)


def test_gradient_checkpointing_is_active_and_gives_the_same_step(tmp_path):
    base = tiny(precision={"dtype": "fp32"}, data={"zero_variance_filter": False},
                rollout={"prompts_per_step": 4, "generations_per_prompt": 4},
                engine={"type": "torch", "device": "cpu"})
    off, p_off, n_off = _one_step(config(base), tmp_path / "off")
    on_cfg = config({**base, "model": {**base["model"], "gradient_checkpointing": True}})
    on, p_on, n_on = _one_step(on_cfg, tmp_path / "on")
    assert on.model.is_gradient_checkpointing and not off.model.is_gradient_checkpointing
    assert n_off == 0 and n_on == len(on.model.get_decoder().layers)  # each layer recomputed
    assert not on.model.training  # back in eval() for generation (KV cache) after the update
    for key in ("train/loss", "train/grad_norm", "train/entropy"):
        assert on.acc[key] == pytest.approx(off.acc[key], rel=1e-4, abs=1e-6), key
    # Same update; Adam's per-coordinate normalization magnifies float noise in near-zero
    # gradients (packed vs shared-prefix forward), hence not bit-exact.
    assert (p_on - p_off).abs().max() < 1e-4


def test_chat_template_prompts_through_the_loop(tmp_path):
    """model.chat_template with a real local checkpoint: prompts are token-id lists (not a
    BatchEncoding) wrapped in the template."""
    from transformers import AutoTokenizer

    from trainer.models.chat import prompt_encoder
    from trainer.models.proxy import proxy_path

    d = tiny(engine={"type": "torch", "device": "cpu"})
    src = proxy_path(config(d))
    local = tmp_path / "chat-model"
    shutil.copytree(src, local)
    tok = AutoTokenizer.from_pretrained(local)
    tok.chat_template = ("{% for m in messages %}<{{ m['role'][0] }}>{{ m['content'] }}"
                         "{% endfor %}{% if add_generation_prompt %}<a>{% endif %}")
    tok.save_pretrained(local)
    cfg = config({**d, "model": {**d["model"], "name_or_path": str(local),
                                 "chat_template": True}})
    run = _Run(cfg, tmp_path / "run")
    first = run.train_prompts[0]
    assert isinstance(first, list) and all(isinstance(t, int) for t in first)
    assert first == prompt_encoder(tok, True)(run.task.train[0].prompt)
    raw = tok(run.task.train[0].prompt, add_special_tokens=False).input_ids
    assert len(first) > len(raw) and first != raw


@pytest.mark.parametrize("aggregation", ["token", "sample", "prompt"])
@pytest.mark.parametrize("world", [2, 3, 7])
def test_shard_weights_make_the_rank_average_the_whole_batch_loss(aggregation, world):
    g = torch.Generator().manual_seed(world)
    G, n_groups, T = 4, 5, 6
    B = G * n_groups
    logp = -torch.rand(B, T, generator=g)
    old = logp + 0.1 * torch.randn(B, T, generator=g)
    adv = torch.randn(B, generator=g)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None] < lengths[:, None]).float()
    group = torch.arange(B) // G

    def loss(rows):
        r = torch.tensor(rows)
        return float(policy_loss(logp[r], old[r], adv[r], mask[r], group[r],
                                 loss_type="cispo", aggregation=aggregation))

    def size(rows):
        return {"tokens": float(mask[rows].sum()), "samples": len(rows),
                "groups": len({r // G for r in rows})}

    rows = list(range(B))
    total, empty = 0.0, 0
    for rank in range(world):
        mine, real = shard_groups(list(range(n_groups)), rank, world)
        local = [r for r in rows if r // G in mine]
        w = shard_weight(aggregation, size(local), size(rows), world) if real else 0.0
        empty += not real
        total += w * loss(local)
    assert empty == max(0, world - n_groups)  # ranks beyond the groups step with weight 0
    assert total / world == pytest.approx(loss(rows), rel=1e-5, abs=1e-7)


def test_unknown_aggregation_has_no_data_parallel_weight():
    with pytest.raises(ValueError, match="loss.aggregation 'median'.*token, sample, prompt"):
        shard_weight("median", {}, {}, 2)
