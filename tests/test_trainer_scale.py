"""Trainer pieces for scale, single process on CPU: gradient checkpointing really on during the
update (same step as without it) and chat-template prompts through the loop. (The data-parallel
loss weighting, exact over ranks and micro-batches, is tests/test_microbatch.py's.)"""

from __future__ import annotations

import shutil

import pytest
import torch
from _trainer_util import config, tiny

from trainer.loop.train import start, train_step
from trainer.torch_axes import MODES


def _one_step(cfg, run_dir):
    torch.manual_seed(0)
    run = start(cfg, run_dir)
    model = run.parts.model
    calls = []
    for layer in model.get_decoder().layers:  # count real checkpointed layer calls
        f = getattr(layer, "_gradient_checkpointing_func", None)
        if f is not None:
            layer._gradient_checkpointing_func = (
                lambda *a, _f=f, **k: calls.append(1) or _f(*a, **k))
    source = MODES.get(cfg.off_policy.mode)(run.ctx)
    source.after_step(model, 0)  # as the loop does: stamp the generator before next()
    try:
        train_step(run, source.next(0))
    finally:
        source.close()
    params = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return run, params, len(calls)


@pytest.mark.slow
def test_gradient_checkpointing_is_active_and_gives_the_same_step(tmp_path):
    base = tiny(precision={"dtype": "fp32"}, data={"zero_variance_filter": False},
                rollout={"prompts_per_step": 4, "generations_per_prompt": 4},
                engine={"type": "torch", "device": "cpu"})
    off, p_off, n_off = _one_step(config(base), tmp_path / "off")
    on_cfg = config({**base, "model": {**base["model"], "gradient_checkpointing": True}})
    on, p_on, n_on = _one_step(on_cfg, tmp_path / "on")
    on_model, off_model = on.parts.model, off.parts.model
    assert on_model.is_gradient_checkpointing and not off_model.is_gradient_checkpointing
    assert n_off == 0 and n_on == len(on_model.get_decoder().layers)  # each layer recomputed
    assert not on_model.training  # back in eval() for generation (KV cache) after the update
    on_stats, off_stats = on.state.window.means(), off.state.window.means()  # the one step's
    for key in ("train/loss", "train/grad_norm", "train/entropy"):
        assert on_stats[key] == pytest.approx(off_stats[key], rel=1e-4, abs=1e-6), key
    # Same update; Adam's per-coordinate normalization magnifies float noise in near-zero
    # gradients (packed vs shared-prefix forward), hence not bit-exact.
    assert (p_on - p_off).abs().max() < 1e-4


@pytest.mark.slow
def test_chat_template_prompts_through_the_loop(tmp_path):
    """model.chat_template with a real local checkpoint: prompts are token-id lists (not a
    BatchEncoding) wrapped in the template."""
    from transformers import AutoTokenizer

    from trainer.models.chat import prompt_encoder
    from trainer.policy import proxy_path

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
    parts = start(cfg, tmp_path / "run").parts
    first = parts.train_prompts[0]
    assert isinstance(first, list) and all(isinstance(t, int) for t in first)
    assert first == prompt_encoder(tok, True)(parts.task.train[0].prompt)
    raw = tok(parts.task.train[0].prompt, add_special_tokens=False).input_ids
    assert len(first) > len(raw) and first != raw
