"""Unit tests of the trainer's pure parts: advantages, filters, pool, length penalty, fp32 head,
run-dir crash safety, registries vs config Literals."""

from __future__ import annotations

import json
import random

import pytest
import torch

from trainer import config as C
from trainer.algo.advantages import NORMALIZATIONS, compute_advantages
from trainer.algo.filters import zero_variance_keep
from trainer.algo.length import CONTROLS, overlong
from trainer.algo.pool import CURRICULA, PromptPool
from trainer.models.precision import LMHead
from trainer import rundir

REWARDS = torch.tensor([1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 1.0, 1.0])
GROUPS = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])


def test_advantage_none_is_group_centered():
    adv = compute_advantages(REWARDS, GROUPS, normalization="none")
    assert adv.tolist() == [1.0, -1.0, -1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_advantage_prompt_divides_by_group_std():
    adv = compute_advantages(REWARDS, GROUPS, normalization="prompt", eps=1e-6)
    # group 0: centered [1,-1,-1,1], unbiased std sqrt(4/3); group 1: all zero stays zero.
    assert adv[0].item() == pytest.approx(1 / (4 / 3) ** 0.5, rel=1e-5)
    assert adv[4:].abs().max().item() == 0.0


def test_advantage_batch_divides_by_batch_std():
    adv = compute_advantages(REWARDS, GROUPS, normalization="batch", eps=1e-6)
    # all centered advantages [1,-1,-1,1,0,0,0,0]: unbiased std sqrt(4/7).
    assert adv[0].item() == pytest.approx(1 / (4 / 7) ** 0.5, rel=1e-5)
    assert adv[4:].abs().max().item() == 0.0


def test_zero_variance_filter_drops_uniform_groups():
    r = [1, 1, 1, -1, -1, -1, 1, -1, -1]
    assert zero_variance_keep(r, 3) == [2]
    assert zero_variance_keep(r, 3, enabled=False) == [0, 1, 2]


def _pool(curriculum="none", npr=True, n=10):
    cfg = C.DataConfig(curriculum=curriculum, no_positive_resampling=npr, npr_threshold=0.9)
    return PromptPool([float(9 - i) for i in range(n)], cfg, seed=0)


def test_npr_retires_solved_prompts_from_later_epochs():
    pool = _pool()
    first = pool.next_batch(10)  # one full epoch
    assert sorted(first) == list(range(10))
    for i in first:
        pool.record(i, 8 if i < 3 else 4, 8)  # prompts 0,1,2 solved (pass rate 1.0)
    second = pool.next_batch(7)
    assert set(second) == set(range(3, 10)) and pool.retired == {0, 1, 2}


def test_without_npr_nothing_is_retired():
    pool = _pool(npr=False)
    for i in pool.next_batch(10):
        pool.record(i, 8, 8)
    assert sorted(pool.next_batch(10)) == list(range(10)) and not pool.retired


def test_curriculum_easy_to_hard_orders_by_difficulty():
    pool = _pool("easy_to_hard")
    assert pool.next_batch(10) == list(range(9, -1, -1))  # difficulty = 9 - i


def test_curriculum_pass_rate_orders_by_measured_pass_rate():
    pool = _pool("pass_rate", npr=False)
    for i in pool.next_batch(10):
        pool.record(i, i % 5, 8)
    order = pool.next_batch(10)
    rates = [pool.pass_rate(i) for i in order]
    assert rates == sorted(rates, reverse=True)


def test_pool_state_round_trip():
    a = _pool()
    a.next_batch(13)
    a.record(3, 5, 8)
    b = _pool()
    b.load_state_dict(json.loads(json.dumps(a.state_dict())))
    assert a.next_batch(20) == b.next_batch(20)


def test_overlong_penalty_formula():
    # clip((L_max - |y|) / L_cache - 1, -1, 0) with L_max 20, L_cache 5
    assert overlong(10, 20, 5) == 0.0
    assert overlong(15, 20, 5) == 0.0
    assert overlong(17, 20, 5) == pytest.approx(-0.4)
    assert overlong(25, 20, 5) == -1.0


def test_fp32_head_under_bf16_autocast():
    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 100, bias=False)
    h = torch.randn(8, 64)
    ref = h.double() @ lin.weight.double().T
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fp32 = LMHead(lin, fp32=True)(h)
        bf16 = LMHead(lin, fp32=False)(h)
    assert fp32.dtype == torch.float32 and bf16.dtype == torch.float32
    err32 = (fp32.double() - ref).abs().max().item()
    err16 = (bf16.double() - ref).abs().max().item()
    assert err32 < 1e-5 < err16


def test_metrics_truncation_drops_lines_past_checkpoint_and_torn_tail(tmp_path):
    for s in (0, 10, 20, 30):
        rundir.append_metrics(tmp_path, {"step": s})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 40, "eval/pa')  # kill -9 mid-write
    assert [r["step"] for r in rundir.read_metrics(tmp_path)] == [0, 10, 20, 30]
    rundir.truncate_metrics(tmp_path, 20)
    assert [r["step"] for r in rundir.read_metrics(tmp_path)] == [0, 10, 20]


def test_checkpoint_recovers_after_kill_between_renames(tmp_path):
    (tmp_path / "checkpoint.old").mkdir()
    (tmp_path / "checkpoint.old" / "state.pt").write_text("old")
    assert rundir.checkpoint_dir(tmp_path) == tmp_path / "checkpoint.old"
    new = tmp_path / "checkpoint.tmp-x"
    new.mkdir()
    (new / "state.pt").write_text("new")
    rundir.commit_checkpoint(tmp_path, new)
    assert (tmp_path / "checkpoint" / "state.pt").read_text() == "new"
    assert not (tmp_path / "checkpoint.old").exists()


def test_torch_axes_point_at_what_their_modules_define():
    """engine.type, off_policy.mode and rollout.backend are registered by `module:name`, imported
    on first use (trainer/torch_axes.py, so the config reads their names without torch): each
    must name a top-level function or class of a module that exists, or a config naming it
    validates and the run fails at its start. Read from the source: the vllm backend's module
    imports vllm, which this environment may not have."""
    import ast
    import importlib.util

    from trainer.torch_axes import BACKENDS, ENGINES, MODES

    for registry in (ENGINES, MODES, BACKENDS):
        for name, target in registry._lazy.items():
            module, attr = target.split(":")
            tree = ast.parse(open(importlib.util.find_spec(module).origin).read())
            defined = {n.name for n in tree.body
                       if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            assert attr in defined, f"{registry.axis} {name!r}: {target} is not defined"


def test_a_torch_axis_unknown_value_is_refused_naming_the_registered_ones():
    with pytest.raises(ValueError, match="'torch' or 'deepspeed'"):
        C.TrainConfig.model_validate({"engine": {"type": "jax"}})


def test_unknown_registry_name_lists_valid_ones():
    with pytest.raises(KeyError, match="valid"):
        NORMALIZATIONS.get("group")


def test_trainer_does_not_import_ablate():
    import pathlib

    src = pathlib.Path(C.__file__).parent
    for f in src.glob("*.py"):
        text = f.read_text()
        assert "import ablate" not in text and "from ablate" not in text, f


def test_arithmetic_eval_is_disjoint_from_train():
    from trainer.tasks import build_task

    t = build_task(C.TaskConfig(num_train_prompts=500, num_eval_prompts=100))
    assert not {p.prompt for p in t.train} & {p.prompt for p in t.eval}
    p = t.train[0]
    assert t.score(p, p.answer) and not t.score(p, p.answer + "1")
    random.seed(0)


def test_rl_pool_and_eval_on_train_split():
    """rl_pool cuts what RL draws from; eval split 'train' scores copies of that pool, so the
    calibration cap marks what eval scores and leaves every training problem answerable."""
    from trainer.tasks import build_task

    full = build_task(C.TaskConfig(num_train_prompts=500, num_eval_prompts=100))
    t = build_task(C.TaskConfig(num_train_prompts=500, num_eval_prompts=100, rl_pool=64,
                                unanswerable_fraction=0.25), "train")
    assert [p.prompt for p in t.train] == [p.prompt for p in full.train[:64]]
    assert [p.prompt for p in t.eval] == [p.prompt for p in t.train]
    assert sum(p.unanswerable for p in t.eval) == 16 and not any(p.unanswerable for p in t.train)
    assert all(t.score(p, p.answer) for p in t.train)
    assert sum(t.score(p, p.answer) for p in t.eval) == 48
    held = build_task(C.TaskConfig(num_train_prompts=500, num_eval_prompts=100, rl_pool=64))
    assert [p.prompt for p in held.eval] == [p.prompt for p in full.eval]


def test_arithmetic_reversed_answer_is_written_least_significant_digit_first():
    from trainer.tasks import build_task

    cfg = {"operators": ["+", "-", "*"], "num_train_prompts": 300, "num_eval_prompts": 10}
    fwd = build_task(C.TaskConfig(**cfg))
    rev = build_task(C.TaskConfig(**cfg, reversed_answer=True))
    for f, r in zip(fwd.train, rev.train):
        assert f.prompt == r.prompt
        sign = "-" if f.answer.startswith("-") else ""
        assert r.answer == sign + f.answer.lstrip("-")[::-1]
        assert rev.score(r, r.answer) and (r.answer == f.answer or not rev.score(r, f.answer))
    assert any(f.answer.startswith("-") for f in fwd.train)  # the sign case is exercised


def test_pipeline_counts_generation_of_batches_refused_as_stale():
    """A batch refused as > k versions old was still generated: the next batch carries its
    generator tokens so the loop counts their FLOPs. (The stream is fed by hand here instead of
    the generator thread, to make the staleness deterministic.)"""
    from trainer.rollouts import Rollout
    from trainer.generation.offpolicy import Batch, GroupStream

    cfg = C.TrainConfig(off_policy={"mode": "pipeline", "k": 2})

    def batch(version: int, gen_tokens: int) -> Batch:
        ro = Rollout(prompts=[[1]], tokens=[[2]], logprobs=[[0.0]], versions=[[version]],
                     loss_mask=[[1]], finished=[True], interrupted=[False], penalty=[0.0],
                     gen_tokens=[gen_tokens])
        return Batch([0], ro, 0.0)

    # The pipeline's group stream without its generator thread: this test is the producer.
    p = GroupStream(cfg.off_policy.k, groups_per_step=1)
    for b in (batch(0, 5), batch(1, 7), batch(9, 3)):
        p.put(b)
    got = p.take(10, lambda: None)
    assert got.rollout.gen_tokens == [3] and p.stale_dropped == 2
    assert got.dropped_gen_tokens == 5 + 7


def test_eval_per_decade_adds_log_spaced_steps_to_every_steps():
    from trainer.config import EvalConfig

    e = EvalConfig(every_steps=50, per_decade=8)
    due = {s for s in range(1, 1001) if e.due(s)}
    log_spaced = {round(10 ** (i / 8)) for i in range(0, 25)}
    assert due == ({s for s in log_spaced if s <= 1000} | set(range(50, 1001, 50)))
    assert {1, 2, 3, 4, 6, 7, 10, 13, 18, 24, 32, 42, 56, 75} <= due
    assert not any(EvalConfig(every_steps=50).due(s) for s in (1, 13, 75))


def test_checkpoint_loads_rollout_types_pickled_where_they_used_to_live():
    """A checkpoint pickles a rollout source's batches (Rollout, Generation): one written when
    they lived in trainer/length.py or trainer/generation/rollout.py resumes now that they live
    in trainer/rollouts.py."""
    import io
    import pickle

    from trainer.loop.checkpoint import _Unpickler
    from trainer.rollouts import Generation, Rollout

    r = Rollout(prompts=[[1]], tokens=[[2]], logprobs=[[0.0]], versions=[[0]], loss_mask=[[1]],
                finished=[True])
    g = Generation(tokens=[[1]], logprobs=[[0.0]], versions=[[0]], finished=[True])
    for old, objs in ((b"trainer.generation.rollout", [r, g]), (b"trainer.length", [r])):
        now = pickle.dumps(objs, protocol=2)  # protocol 2 spells a class "c<module>\n<name>"
        then = now.replace(b"ctrainer.rollouts\n", b"c" + old + b"\n")
        assert then != now
        assert _Unpickler(io.BytesIO(then)).load() == objs
