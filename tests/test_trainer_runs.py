"""Real (tiny, few-step) trainer runs on the CPU proxy: every axis value, both off-policy
modes, in-flight weight pushes, forced interruption, checkpoint/resume and kill -9, divergence,
and a short run whose held-out pass rate measurably rises."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from _trainer_util import REPO, PROXY, close, config, merge, metrics, status, tiny

import trainer

REQUIRED = ["step", "samples", "tokens", "flops", "gpu_hours", "eval/pass_rate",
            "train/reward", "train/entropy", "train/truncation_rate", "train/is_ratio_mean",
            "train/clip_frac", "train/grad_norm", "data/zero_variance_dropped",
            "flops/generation", "flops/training"]


@pytest.fixture(scope="session")
def warm_proxy():
    """Build (or load from the on-disk cache) the warmed proxy once for the session."""
    from trainer.policy import load_model

    torch.set_num_threads(1)
    model, tok = load_model(config(tiny()))
    return model, tok


def _run(tmp_path: Path, name: str, over: dict) -> tuple[list[dict], dict]:
    d = tmp_path / name
    trainer.run(config(tiny(**over)), d)
    return metrics(d), status(d)


def _math_file(tmp_path: Path) -> str:
    import json

    rows = [{"problem": f"What is {a} times {b}?", "answer": str(a * b)}
            for a in range(2, 9) for b in range(2, 9)]
    p = tmp_path / "math.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


# Each recipe axis value is exercised by at least one real run (values zipped to keep it short).
AXIS_RUNS = {
    "ppo-sample-prompt": {"loss": {"type": "ppo", "aggregation": "sample"},
                          "advantage": {"normalization": "prompt"}},
    "dapo-token-none": {"loss": {"type": "dapo", "aggregation": "token"},
                        "advantage": {"normalization": "none"}, "data": {"curriculum": "easy_to_hard"}},
    "gspo-prompt-batch": {"loss": {"type": "gspo", "aggregation": "prompt", "eps_low": 1e-3,
                                   "eps_high": 1e-3}, "data": {"curriculum": "pass_rate"}},
    "cispo-ppo_off_policy": {"off_policy": {"mode": "ppo_off_policy", "k": 2},
                             "data": {"zero_variance_filter": False, "no_positive_resampling": False}},
    "bf16-no-fp32-heads": {"precision": {"dtype": "bf16", "generator_lm_head_fp32": False,
                                         "trainer_lm_head_fp32": False}},
    "interrupt": {"length": {"control": "interrupt", "thinking_budget": 2,
                             "budget_min_fraction": 0.5, "answer_budget": 3, "interrupt_text": "=>"},
                  "data": {"zero_variance_filter": False}},
    "overlong_penalty": {"length": {"control": "overlong_penalty", "overlong_max": 4,
                                    "overlong_cache": 2}},
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(AXIS_RUNS))
def test_axis_value_runs(tmp_path, warm_proxy, name):
    rows, st = _run(tmp_path, name, AXIS_RUNS[name])
    assert st["state"] == "done" and st["step"] == 4
    assert [r["step"] for r in rows] == [0, 2, 4]
    for r in rows[1:]:
        missing = [k for k in REQUIRED if k not in r]
        assert not missing, missing
        assert all(math.isfinite(v) for v in r.values() if isinstance(v, float))
    assert rows[-1]["samples"] == 4 * 8 * 4 and rows[-1]["flops"] > rows[1]["flops"] > 0
    if name == "interrupt":
        assert rows[-1]["train/interrupt_rate"] > 0.5  # a 1-2 token thinking budget
    if name == "overlong_penalty":
        # answers are 2-4 tokens: > 2 tokens is penalised, so mean reward < mean pass rate*2-1
        assert rows[-1]["train/reward"] < 2 * rows[-1]["train/pass_rate"] - 1
    if name == "cispo-ppo_off_policy":
        assert rows[-1]["data/zero_variance_dropped"] == 0


@pytest.mark.slow
def test_tasks_reasoning_gym_and_math(tmp_path):
    # A proxy with no warm-up (fresh char model): these only check the plumbing runs for real.
    fresh = {"model": {"proxy": {"warmup_target": None}}, "rollout": {"max_new_tokens": 4},
             "budget": {"steps": 2}, "eval": {"every_steps": 2, "num_prompts": 8}}
    for name, task in [("rg", {"name": "reasoning_gym:basic_arithmetic", "num_train_prompts": 64,
                               "num_eval_prompts": 16}),
                       ("math", {"name": "math", "path": _math_file(tmp_path),
                                 "num_train_prompts": 30, "num_eval_prompts": 8})]:
        rows, st = _run(tmp_path, name, merge(fresh, {"task": task}))
        assert st["state"] == "done" and [r["step"] for r in rows] == [0, 2]


def test_math_verify_scores_equivalent_forms(tmp_path):
    from trainer.config import TaskConfig
    from trainer.tasks import build_task

    t = build_task(TaskConfig(name="math", path=_math_file(tmp_path), num_train_prompts=30,
                              num_eval_prompts=8))
    p = t.train[0]
    assert t.score(p, f"the answer is {p.answer}") and t.score(p, f"$\\frac{{{2 * int(p.answer)}}}{{2}}$")
    assert not t.score(p, str(int(p.answer) + 1))
    assert not {q.prompt for q in t.train} & {q.prompt for q in t.eval}


@pytest.mark.slow
def test_pipeline_records_versions_and_staleness(tmp_path, warm_proxy):
    rows, st = _run(tmp_path, "pipe", {"off_policy": {"mode": "pipeline", "k": 2},
                                       "budget": {"steps": 6}, "eval": {"every_steps": 3}})
    assert st["state"] == "done"
    last = rows[-1]
    # Data came from a concurrent generator: some tokens were sampled by older weights.
    assert last["pipeline/staleness_max"] >= 1
    assert last["pipeline/staleness_max"] <= 2 + 1  # never more than k behind (+1: next step's push)


@pytest.mark.slow
def test_inflight_weight_push_changes_version_mid_sequence(warm_proxy):
    from trainer.generation.rollout import HFGenerator

    model, tok = warm_proxy
    c = config(tiny())
    gen = HFGenerator(c, model, tok, own_copy=True)
    calls = {"n": 0}

    def push_on_third_decode(module, args, kwargs, out):
        calls["n"] += 1
        if calls["n"] == 3:  # the trainer finished a step while this batch is mid-sequence
            gen.sync_weights(model, 7)

    h = gen.body.register_forward_hook(push_on_third_decode, with_kwargs=True)
    try:
        prompts = [tok("12+34=", add_special_tokens=False).input_ids]
        out = gen.generate(prompts, n=4, max_new_tokens=6, temperature=3.0, top_p=1.0, seed=0)
    finally:
        h.remove()
    longest = max(out.versions, key=len)
    assert longest[:3] == [0, 0, 0] and set(longest[3:]) == {7}
    assert all(len(v) == len(t) == len(lp) for v, t, lp in zip(out.versions, out.tokens, out.logprobs))


@pytest.mark.slow
def test_ppo_off_policy_takes_k_steps_per_generation(warm_proxy):
    from trainer.generation.offpolicy import Context, PPOOffPolicy
    from trainer.algo.pool import DataPosition, PromptPool

    model, tok = warm_proxy
    c = config(tiny(off_policy={"mode": "ppo_off_policy", "k": 3}))
    prompts = [tok(f"{i:02d}+{i:02d}=", add_special_tokens=False).input_ids for i in range(50)]
    ctx = Context(c, model, tok, DataPosition(PromptPool([0.0] * 50, c.data, 0)), prompts)
    src = PPOOffPolicy(ctx)
    batches = [src.next(0) for _ in range(3)]
    assert ctx.data.gen_counter == 1  # one generation served three optimizer steps
    ids = [i for b in batches for i in b.prompt_ids]
    assert len(ids) == 3 * 8 and len(set(ids)) == len(ids)
    assert all(len(b.rollout.tokens) == 8 * 4 for b in batches)
    src.next(0)
    assert ctx.data.gen_counter == 2


@pytest.mark.slow
def test_ppo_off_policy_later_minibatches_are_off_policy(tmp_path, warm_proxy):
    on, _ = _run(tmp_path, "k1", {"off_policy": {"mode": "ppo_off_policy", "k": 1},
                                  "optim": {"lr": 1e-3, "warmup_steps": 0}})
    off, _ = _run(tmp_path, "k4", {"off_policy": {"mode": "ppo_off_policy", "k": 4},
                                   "optim": {"lr": 1e-3, "warmup_steps": 0}})
    dev = lambda rows: max(abs(r["train/is_ratio_mean"] - 1) for r in rows[1:])  # noqa: E731
    assert dev(on) < 1e-3  # on-policy in fp32: ratios are 1
    assert dev(off) > 10 * dev(on)


@pytest.mark.slow
def test_forced_interruption_appends_text_and_masks_it(warm_proxy):
    from trainer.algo.length import generate_rollout
    from trainer.generation.rollout import HFGenerator

    model, tok = warm_proxy
    c = config(tiny(length={"control": "interrupt", "thinking_budget": 2, "budget_min_fraction": 0.5,
                            "answer_budget": 3, "interrupt_text": "=>"}))
    text = tok("=>", add_special_tokens=False).input_ids
    prompts = [tok("57+68=", add_special_tokens=False).input_ids]
    ro = generate_rollout(HFGenerator(c, model, tok), prompts, c, tok, seed=1, n=8, temperature=1.0)
    cut = [i for i, x in enumerate(ro.interrupted) if x]
    assert cut, "a 1-2 token budget must interrupt 3-digit answers"
    for i in cut:
        toks, m = ro.tokens[i], ro.loss_mask[i]
        j = m.index(0)
        assert 1 <= j <= 2 and toks[j:j + 2] == text and m[j:j + 2] == [0, 0]
        assert ro.logprobs[i][j:j + 2] == [0.0, 0.0]
        assert len(toks) <= j + 2 + 3
    # Generation FLOPs count what the generator ran: for a cut sample the first pass (prompt +
    # up to 2 thinking tokens, some cut away) plus the answer pass's re-prefill of prompt +
    # kept thinking + text and its decoded answer; more than prompt + final tokens.
    P = len(prompts[0])
    for i, toks in enumerate(ro.tokens):
        if ro.interrupted[i]:
            j = ro.loss_mask[i].index(0)
            assert 2 * P + j + len(toks) <= ro.gen_tokens[i] <= 2 * P + 2 + len(toks)
        else:
            assert ro.gen_tokens[i] == P + len(toks)


@pytest.mark.slow
def test_checkpoint_resume_is_exact(tmp_path, warm_proxy):
    over = {"off_policy": {"mode": "ppo_off_policy", "k": 2}, "budget": {"steps": 6},
            "eval": {"every_steps": 2}}
    straight, _ = _run(tmp_path, "straight", over)
    d = tmp_path / "resumed"
    trainer.run(config(tiny(**merge(over, {"budget": {"steps": 2}}))), d)
    assert status(d)["state"] == "done"
    trainer.run(config(tiny(**over)), d)  # a larger budget continues from the checkpoint
    resumed = metrics(d)
    keys = ["step", "samples", "tokens", "flops", "eval/pass_rate", "train/reward",
            "train/grad_norm"]
    assert [[r.get(k) for k in keys] for r in resumed] == \
        [[close(r.get(k)) for k in keys] for r in straight]
    a = torch.load(tmp_path / "straight" / "checkpoint" / "engine" / "engine.pt")["model"]
    b = torch.load(d / "checkpoint" / "engine" / "engine.pt")["model"]
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_keeps_metrics_continuous(tmp_path, warm_proxy):
    import yaml

    cfg = tiny(budget={"steps": 40}, eval={"every_steps": 4}, checkpoint={"every_steps": 3},
               off_policy={"mode": "pipeline", "k": 4})
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    d = tmp_path / "run"
    cmd = [sys.executable, "-m", "ablate", "run", str(path), "--out", str(d), "--json"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    killed_at = []
    for target in (6, 17, 29):  # kill at three different points, whatever is being written
        p = subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        deadline = time.time() + 120
        while time.time() < deadline and p.poll() is None:
            try:
                if status(d)["step"] >= target:
                    break
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.02)
        p.send_signal(signal.SIGKILL)
        p.wait()
        killed_at.append(status(d).get("step"))
    assert any(s and s < 40 for s in killed_at), killed_at
    out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    steps = [r["step"] for r in metrics(d)]
    assert steps == list(range(0, 41, 4)), steps
    samples = [r["samples"] for r in metrics(d)]
    assert samples == sorted(samples) and len(set(samples)) == len(samples)


@pytest.mark.slow
def test_nan_marks_diverged_and_stops_cleanly(tmp_path, warm_proxy):
    # Every reward NaN (and no filter to drop the groups) poisons the advantages, hence the
    # loss, on the first update whichever prompts the model happens to solve.
    poison = {"reward": {"correct": float("nan"), "incorrect": float("nan")},
              "data": {"zero_variance_filter": False}, "budget": {"steps": 20}}
    rows, st = _run(tmp_path, "nan", poison)
    assert st["state"] == "diverged" and st["step"] == 1
    assert [r["step"] for r in rows] == [0]
    d = tmp_path / "nan"
    assert (d / "checkpoint").exists()  # the last good state stays resumable
    trainer.run(config(tiny(**poison)), d)
    assert status(d)["state"] == "diverged"  # a diverged run is not silently restarted


@pytest.mark.slow
def test_cli_bad_config_exits_2_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("loss:\n  type: cispo\n  agregation: token\n")
    out = tmp_path / "never"
    r = subprocess.run([sys.executable, "-m", "ablate", "run", str(bad), "--out", str(out)],
                       cwd=REPO, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 2 and "loss.agregation" in r.stderr and "aggregation" in r.stderr
    assert "Traceback" not in r.stderr and not out.exists()


@pytest.mark.slow
def test_short_real_run_pass_rate_rises(tmp_path, warm_proxy):
    """The proxy recipe, shortened: its eval score (the RL pool, near-greedy) must measurably
    rise. Generation runs in lock-step (ppo_off_policy, k=1) so the trajectory does not hang on
    thread timing, which the pipeline's in-flight weight pushes do; the bar of 0.04 is about
    the proxy's eval-to-eval swing, far below the ~0.25 it rises over 60 steps (0.47 -> 0.75)."""
    d = tmp_path / "rise"
    cfg = merge(PROXY, {"budget": {"steps": 60}, "eval": {"every_steps": 30},
                        "off_policy": {"mode": "ppo_off_policy", "k": 1}})
    trainer.run(config(cfg), d)
    rows = metrics(d)
    assert status(d)["state"] == "done"
    first, last = rows[0]["eval/pass_rate"], rows[-1]["eval/pass_rate"]
    assert last > first + 0.04, (first, last)
    assert status(d)["progress"] == 1.0  # the step budget, spent


@pytest.mark.slow
def test_shared_prefix_forward_equals_packed_forward(warm_proxy):
    """The training forward shares each prompt across its samples; it must be the same math."""
    from trainer.models.logprobs import completion_logprobs, pack, shared_prefix_logprobs
    from trainer.models.precision import LMHead

    model, tok = warm_proxy
    enc = lambda s: tok(s, add_special_tokens=False).input_ids  # noqa: E731
    prompts = [enc("12+34="), enc("7+5=")]  # different lengths: left padding in play
    group = [0, 0, 0, 1, 1, 1]
    comps = [enc("46") + [2], [2], enc("4"), enc("12") + [2], enc("1"), enc("999")]
    head = LMHead(model.get_output_embeddings(), True)
    b = pack([prompts[g] for g in group], comps, tok.pad_token_id)
    grads = []
    for fn in ("packed", "shared"):
        model.zero_grad()
        if fn == "packed":
            lp, _ = completion_logprobs(model.get_decoder(), head, b, torch.device("cpu"), "fp32")
        else:
            lp, _ = shared_prefix_logprobs(model.get_decoder(), head, prompts, group, comps,
                                           tok.pad_token_id, torch.device("cpu"), "fp32")
        (lp * b["mask"]).sum().backward()
        grads.append((lp.detach() * b["mask"], model.model.layers[0].mlp.up_proj.weight.grad.clone()))
    model.zero_grad()
    # Same math, different summation order: equal up to float32 rounding relative to the
    # values' scale (an absolute tolerance fails on a machine whose gradients are larger).
    # A real fault (positions, masks, cache indexing) moves them by percents.
    for (a, b_), rtol in zip(zip(*grads), (1e-5, 1e-3)):
        assert (a - b_).abs().max() <= rtol * a.abs().max(), ((a - b_).abs().max(), a.abs().max())


def _build(cache: str, q) -> None:
    os.environ["ABLATE_CACHE"] = cache
    from trainer.policy import proxy_path

    q.put(str(proxy_path(config(tiny(model={"proxy": {"hidden_size": 32, "num_layers": 1,
                                                       "num_heads": 2, "intermediate_size": 64,
                                                       "warmup_target": None}})))))


@pytest.mark.slow
def test_concurrent_proxy_builders_share_one_cache_entry(tmp_path):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_build, args=(str(tmp_path), q)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)  # a deadline for a hang: two warm-ups side by side on a busy machine
    paths = {q.get(timeout=60), q.get(timeout=60)}
    assert len(paths) == 1 and all(p.exitcode == 0 for p in procs)
    entries = [e for e in (tmp_path / "proxy").iterdir() if not e.name.endswith(".lock")]
    assert [e.name for e in entries] == [Path(paths.pop()).name]  # no half-written leftovers
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(entries[0]).config.hidden_size == 32
