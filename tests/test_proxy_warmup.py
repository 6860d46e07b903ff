"""The CPU proxy's warm-up stops at a measured pass rate, and its cache key covers what changes
the built model (and nothing a study varies between variants)."""

from __future__ import annotations

import pytest
import torch

from _trainer_util import PROXY, config, merge

# A small model on plenty of data: reaches a held-out pass rate of a few percent in ~200 steps.
SMALL = {"model": {"proxy": {"hidden_size": 64, "num_layers": 2, "num_heads": 4,
                             "intermediate_size": 128, "max_position_embeddings": 64,
                             "warmup_target": 0.1, "warmup_band": 0.08, "warmup_batch_size": 32}},
         "task": {"num_train_prompts": 2000, "num_eval_prompts": 64}}


@pytest.mark.slow
def test_warmup_stops_inside_the_band_and_eval_measures_the_same(tmp_path, monkeypatch):
    from trainer.evaluate import pass_rate
    from trainer.policy import load_model
    from trainer.warmup import WARMUP_EVAL_SEED
    from trainer.generation.rollout import HFGenerator
    from trainer.tasks import build_task

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))
    torch.set_num_threads(1)
    c = config(merge(PROXY, SMALL))
    model, tok = load_model(c)  # builds, saves, reloads from the cache dir
    log = model.config.ablate_warmup
    assert abs(log["pass_rate"] - 0.1) <= 0.08 and log["steps"] > 0
    assert [s for s, _ in log["checks"]][0] == 0 and log["checks"][-1] == [log["steps"], log["pass_rate"]]
    # The saved model measured again the warm-up's way gives the logged number exactly:
    # the stopping rule and eval share one decode-and-score path.
    task = build_task(c.task)
    probs = task.eval[:200]
    prompts = [tok(p.prompt, add_special_tokens=False).input_ids for p in probs]
    mcfg = c.model_copy(update={"rollout": c.rollout.model_copy(update={"max_new_tokens": 6}),
                                "length": c.length.model_copy(update={"control": "none"})})
    again = pass_rate(HFGenerator(mcfg, model, tok), task, probs, prompts, mcfg, tok,
                      seed=WARMUP_EVAL_SEED, k=16, temperature=1.0)
    assert again == pytest.approx(log["pass_rate"], abs=1e-9)


def test_warmup_that_never_reaches_its_band_says_what_to_change(tmp_path, monkeypatch):
    from trainer.models.proxy import WarmupError
    from trainer.warmup import build_proxy

    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))
    c = config(merge(PROXY, merge(SMALL, {"model": {"proxy": {
        "warmup_target": 0.9, "warmup_band": 0.01, "warmup_max_steps": 30}}})))
    with pytest.raises(WarmupError) as e:
        build_proxy(c)
    msg = str(e.value)
    assert "warmup_max_steps" in msg and "0.9 +- 0.01" in msg and "\n" not in msg


def test_proxy_is_built_with_denormals_flushed_like_the_trainer_runs():
    """A warm-up's steps and weights differ with and without flushed denormals (the recipe's:
    1,066 vs 1,069 steps), and the trainer flushes them; so the build must flush them itself,
    or the cached model would depend on which process (a run, a test fixture, a benchmark)
    built it first. Checked by the mode the build leaves: a denormal input reads as zero."""
    from trainer.warmup import build_proxy

    denormal = lambda: (torch.tensor([1e-39], dtype=torch.float32) * 1.0).item()
    torch.set_flush_denormal(False)
    if denormal() == 0.0:
        pytest.skip("this CPU flushes denormals regardless of torch.set_flush_denormal")
    c = config(merge(PROXY, merge(SMALL, {"model": {"proxy": {"warmup_target": None}}})))
    build_proxy(c)
    assert denormal() == 0.0


def test_cache_key_covers_the_build_not_the_rl_settings(monkeypatch):
    import trainer.models.proxy as proxy

    base = config(PROXY)
    key = proxy.proxy_key(base)
    # Every variant of a study starts from one warmed model ...
    for over in ({"loss": {"type": "ppo"}}, {"optim": {"lr": 3e-5}}, {"seed": 7},
                 {"rollout": {"prompts_per_step": 32}}, {"task": {"unanswerable_fraction": 0.3}},
                 {"eval": {"samples_per_prompt": 4}}, {"length": {"control": "overlong_penalty"}}):
        assert proxy.proxy_key(config(merge(PROXY, over))) == key, over
    # ... and whatever changes the built model changes the key, the warm-up code's version too.
    for over in ({"task": {"data_seed": 1}}, {"model": {"proxy": {"warmup_target": 0.3}}},
                 {"model": {"proxy": {"hidden_size": 64}}}, {"task": {"digits": 3}}):
        assert proxy.proxy_key(config(merge(PROXY, over))) != key, over
    monkeypatch.setattr(proxy, "WARMUP_VERSION", proxy.WARMUP_VERSION + 1)
    assert proxy.proxy_key(base) != key


def test_unanswerable_share_is_exact_on_every_eval_prefix_and_caps_a_perfect_answerer():
    from trainer.tasks import build_task

    c = config(merge(PROXY, {"task": {"unanswerable_fraction": 0.3}}))
    task = build_task(c.task)
    plain = build_task(config(PROXY).task)
    assert [p.prompt for p in task.eval] == [p.prompt for p in plain.eval]  # same problems
    for n in (1, 10, 33, 200):
        solved = sum(task.score(p, p.answer) for p in task.eval[:n])
        assert solved == n - int(n * 0.3), n  # ceiling of a perfect model: 1 - floor(0.3 n)/n
    assert all(plain.score(p, p.answer) for p in plain.eval)
    assert all(task.score(p, p.answer) for p in task.train)  # training untouched
    # The marked problems are spread through the list, not the easy or hard end of it.
    marked = [p.difficulty for p in task.eval if p.unanswerable]
    rest = [p.difficulty for p in task.eval if not p.unanswerable]
    assert abs(sum(marked) / len(marked) - sum(rest) / len(rest)) < 0.25


@pytest.mark.slow
def test_cli_run_with_an_unreachable_warmup_target_is_one_line_exit_2(tmp_path):
    import os
    import subprocess
    import sys

    import yaml

    from _trainer_util import REPO

    cfg = merge(PROXY, merge(SMALL, {"model": {"proxy": {
        "warmup_target": 0.9, "warmup_band": 0.01, "warmup_max_steps": 20}}, "budget": {"steps": 2}}))
    path = tmp_path / "unreachable.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "ablate", "run", str(path), "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, cwd=REPO,
                       env=dict(os.environ, PYTHONPATH=str(REPO), ABLATE_CACHE=str(tmp_path / "c")))
    assert r.returncode == 2, r.stderr[-2000:]
    err = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "warmup_max_steps" in err[0] and "unreachable.yaml" in err[0]
    assert "Traceback" not in r.stderr
