"""Plans that learn from the runs (issue 47 point 6, issue 52 point 1): the run's rates.json
(trainer/loop/rates.py writes it, trainer/plan/rates.py reads it), the calibration a plan of
runs not started takes from it, the auto split re-chosen on measured rates, the range a plan
gives before any run has measured, and the dry run and `ablate status` showing planned vs
measured. The slow test trains a proxy study's two waves and holds the second to the plan
its first wave's measurements made."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import yaml
from _cli import ablate

from ablate.studies.measured import _Run, comparison, learn
from trainer.config import TrainConfig
from trainer.plan.rates import calibration, measured, planned_rates
from trainer.plan.split_choice import choose_split
from trainer.plan.time_jobs import Limits
from trainer.plan.time_plan import completion_cap, plan_range, plan_time
from trainer.validate import JobShape

ROOT = Path(__file__).resolve().parents[1]
PAPER_SHAPE = JobShape(nodes=2, ranks_per_node=4, gpus_per_node=8, gpu_memory_gib=80,
                       gpu_model="h100", ranks_auto=True)


def recipe(name: str, **over) -> TrainConfig:
    tree = yaml.safe_load((ROOT / "recipes" / name).read_text())
    for k, v in over.items():
        tree[k] = {**tree.get(k, {}), **v}
    return TrainConfig.model_validate(tree)


def fake_doc(c: TrainConfig, shape: JobShape, *, gen: float, train: float, completion: float,
             kept: float, steps: int = 100, start_s: float = 40.0) -> dict:
    """A rates.json as a run of `c` would write it whose generation ran `gen` times the plan's
    tokens/s, its training `train` times the plan's FLOP/s, at `completion` tokens a sample
    and `kept` of its groups trained; its steps those parts combined as its plan combines them
    (the slower where they overlap, else in turn)."""
    tp = plan_time(c, shape)
    p = planned_rates(tp, c)
    samples = c.rollout.prompts_per_step * c.rollout.generations_per_prompt
    groups = c.rollout.prompts_per_step
    gen_s = p["generation_s"] * completion / p["completion_tokens"] / gen
    tf = p["train_flops_per_step"] * kept  # the plan's at kept 1 and its completions (same here)
    train_s = p["train_s"] * kept / train
    step = max(gen_s, train_s) if p["overlap"] else gen_s + train_s
    sums = {"steps": steps, "samples": samples * steps, "groups": groups * steps,
            "kept_groups": kept * groups * steps, "completion_tokens": completion * samples * steps,
            "generation_s": gen_s * steps, "train_s": train_s * steps,
            "train_tokens": 1.0 * steps, "train_flops": tf * steps, "wall_s": step * steps,
            "flops": p["flops_per_step"] * steps, "evals": 0, "eval_s": 0.0}
    return {"version": 1, "planned": p, "sums": sums, "shape": dataclasses.asdict(shape),
            "attempts": [{"resumed_from": 0, "start_s": start_s, "first_step_s": step}]}


def test_measured_rates_are_per_step_means_and_the_refill_is_the_first_steps_excess():
    c = recipe("proxy.yaml")
    doc = fake_doc(c, JobShape(), gen=0.5, train=0.25, completion=3.5, kept=0.6)
    doc["attempts"].append({"resumed_from": 50, "start_s": 20.0,
                            "first_step_s": doc["sums"]["wall_s"] / 100 + 2.0})
    doc["sums"]["wall_s"] += 2.0
    m = measured(doc)
    assert m["completion_tokens"] == pytest.approx(3.5) and m["kept_share"] == pytest.approx(0.6)
    assert m["job_start_s"] == pytest.approx(30.0)
    assert m["refill_s"] == pytest.approx(1.0, rel=0.05)  # (0 + 2 s) over two attempts
    assert m["generation_tokens_per_s_engine"] == pytest.approx(
        doc["planned"]["generation_tokens_per_s_engine"] * 0.5, rel=1e-4)  # (plan: to 0.1/s)


def test_a_plan_from_a_runs_own_rates_gives_back_its_step_and_its_lengths():
    """Calibrated on one run, the plan of the same config is that run: its step, its
    completions, its kept groups; a FLOPs budget then plans more steps (fewer FLOPs a step)."""
    c = recipe("proxy.yaml")
    doc = fake_doc(c, JobShape(), gen=0.5, train=0.25, completion=3.0, kept=0.6)
    a = calibration([doc], completion_cap(c), configs=[c])
    assert a.completion == pytest.approx(3.0) and a.kept_share == pytest.approx(0.6)
    assert a.gen_speed == pytest.approx(0.5, rel=1e-4)
    assert a.train_speed == pytest.approx(0.25, rel=1e-6)
    t, t0 = plan_time(c, JobShape(), a=a), plan_time(c, JobShape())
    assert t.step_s == pytest.approx(measured(doc)["step_s"], rel=1e-4)
    assert t.job_start_s == pytest.approx(40.0)
    assert t.steps > t0.steps and t.basis == "assumed"  # (the dry run names the basis)


def test_measured_slow_training_rechooses_the_auto_split_and_says_so(tmp_path):
    """loss_agg on 2 x 8 H100: the plan picks 6 generate / 2 train (generation 15 min,
    training 13 min a step); a run whose training measured MFU 0.21 (0.6 of the plan's 0.35)
    makes the runs not started take a split with more training GPUs."""
    from ablate.studies.expand import expand
    from ablate.studies.study import load_study

    c = expand(load_study(ROOT / "recipes" / "loss_agg.yaml"))[0].config
    before = choose_split(c, PAPER_SHAPE).generation_gpus
    doc = fake_doc(c, PAPER_SHAPE, gen=1.0, train=0.6,
                   completion=plan_time(c, PAPER_SHAPE).completion_tokens, kept=1.0)
    a = calibration([doc], completion_cap(c))
    after = choose_split(c, PAPER_SHAPE, a=a).generation_gpus
    assert after < before, (before, after)
    (tmp_path / "r0").mkdir()
    (tmp_path / "r0" / "rates.json").write_text(json.dumps(doc))
    got = learn([_Run("r0", "v", 0, c), _Run("r1", "v", 1, c)], PAPER_SHAPE,
                Limits(gpu_model="h100"), tmp_path)
    assert set(got.times) == {"r1"} and got.basis["r1"].endswith("this variant")
    assert got.split["v"] == (f"auto split re-chosen on the measured rates: {before}/"
                              f"{8 - before} -> {after}/{8 - after} (generate/train)")
    rows = {k: (p, m) for k, _, p, m in comparison(got.docs)}
    assert rows["mfu"][1] == pytest.approx(0.35 * 0.6, rel=1e-6)


def test_before_any_run_the_plan_is_a_range_naming_what_sets_the_step():
    c = recipe("scalerl.yaml")
    r = plan_range(c, PAPER_SHAPE, Limits(gpu_model="h100"))
    point = plan_time(c, PAPER_SHAPE, Limits(gpu_model="h100"))
    lo, hi = r["step_s"]
    assert lo < point.step_s < hi and hi > 1.3 * lo
    assert len(r["constants"]) == 3 and r["sets_step"] in (
        "the training MFU", "the decode bandwidth", "the completions' length")
    proxy = plan_range(recipe("proxy.yaml"), JobShape())
    assert proxy["sets_step"] == "the completions' length" and len(proxy["constants"]) == 1
    # a FLOPs budget: longer completions, fewer steps
    assert proxy["steps"][0] < proxy["steps"][1]


def test_the_proxy_plans_its_answers_mean_length_and_the_prompts_generation_flops():
    """Issue 52 point 1: the quickstart planned 628 steps (completions at the cap of 6, the
    prompt's generation FLOPs left out) where its runs took 768-975; its answers average
    3.5 tokens (2.49 digits + the end token: train/response_len 3.50-3.53)."""
    from ablate.studies.expand import expand
    from ablate.studies.study import load_study

    v = expand(load_study(ROOT / "recipes" / "quickstart.yaml"))[0]
    t = plan_time(v.config, JobShape())
    assert t.completion_tokens == pytest.approx(3.49, abs=0.03)
    for took in (768, 969, 975):  # the quickstart's 4 runs (benchmarks/RESULTS.md, issue 52)
        assert abs(t.steps - took) / took <= 0.25, (t.steps, took)


def test_dry_run_and_status_show_planned_vs_measured_within_80_columns(tmp_path):
    """A study with one run measured: both commands print the comparison and re-plan the
    runs not started, no line over 80 columns; --json carries the rates."""
    from ablate.studies.expand import expand
    from ablate.studies.study import load_study

    vs = expand(load_study(ROOT / "recipes" / "quickstart.yaml"))
    root = tmp_path / "quickstart"
    doc = fake_doc(vs[0].config, JobShape(), gen=0.5, train=0.5, completion=3.5, kept=0.9)
    (root / vs[0].run_id).mkdir(parents=True)
    (root / vs[0].run_id / "rates.json").write_text(json.dumps(doc))
    (root / "variants.json").write_text(json.dumps([v.to_json() for v in vs]))  # as the store
    r = ablate("sweep", str(ROOT / "recipes" / "quickstart.yaml"), "--dry-run",
               "--results", str(tmp_path), columns=80)
    assert r.returncode == 0, r.stderr
    assert "planned vs measured (1 of 4 runs have measured; means):" in r.stdout, r.stdout
    assert "planned from the rates measured on 1 run of this variant" in r.stdout
    assert "range until a run measures" not in r.stdout
    assert max(map(len, r.stdout.splitlines())) <= 80, r.stdout
    s = ablate("status", str(root), columns=80)
    assert "planned vs measured" in s.stdout and "re-planned, not started" in s.stdout, s.stdout
    assert max(map(len, s.stdout.splitlines())) <= 80, s.stdout
    j = json.loads(ablate("status", str(root), "--json").stdout)
    assert j[0]["rates"]["measured"]["kept_share"] == pytest.approx(0.9)
    assert j[1]["rates"]["replanned"]["steps"] > 0


@pytest.mark.slow
def test_a_second_wave_is_planned_from_the_first_within_15_percent(tmp_path):
    """A proxy study (sampling at 0.3: a third of its groups dropped by the zero-variance
    filter, which no plan knows beforehand) to a FLOPs budget: wave 1 (seed 0) trains, its
    rates.json re-plans wave 2 (seed 1), which then trains; the planned steps are within 15%
    of those it took. Its seconds are printed (the machine's load moves them)."""
    import trainer
    from _trainer_util import merge, tiny
    from trainer import rundir

    tree = tiny(rollout={"temperature": 0.3}, budget={"steps": None, "flops": 2.4e10},
                eval={"every_steps": 100}, checkpoint={"every_steps": 100})
    c0 = TrainConfig.model_validate(tree)
    c1 = TrainConfig.model_validate(merge(tree, {"seed": 1}))
    prior = plan_time(c1, JobShape())
    trainer.run(c0, tmp_path / "s0")
    got = learn([_Run("s0", "v", 0, c0), _Run("s1", "v", 1, c1)], JobShape(), Limits(),
                tmp_path)
    plan = got.times["s1"]
    trainer.run(c1, tmp_path / "s1")
    took = rundir.last_metrics_row(tmp_path / "s1")["step"]
    m = measured(rundir.read_rates(tmp_path / "s1"))
    print(f"wave 2: planned {plan.steps} steps of {plan.step_s:.3f} s from wave 1 (before any "
          f"run: {prior.steps} of {prior.step_s:.3f} s); took {took} of {m['step_s']:.3f} s; "
          f"kept {m['kept_share']:.2f}")
    assert abs(plan.steps - took) <= 0.15 * took, (plan.steps, took)
    assert math.isfinite(m["job_start_s"]) and m["job_start_s"] > 0
