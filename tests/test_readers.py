"""Readers of other tools' logs, each on files in the exact shape that tool writes.

Shapes (checked against the tools' own source): W&B chart "Export CSV" (Step, "<run> -
<metric>", "__MIN"/"__MAX"); MLflow's file store (mlruns/<exp>/<run>/metrics/<key>, lines
"timestamp value step", meta.yaml, tags/mlflow.runName); verl's Tracking (TensorBoard
SummaryWriter.add_scalar(key, value, step) in tensorboard_log/<project>/<experiment>, and its
FileLogger JSONL {"step", "data"}); TRL/HF Trainer (TensorBoard "train/x" and "eval/x" under
<output_dir>/runs/<date_host>, "eval_" keys in logs, trainer_state.json log_history).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from ablate.errors import InputError
from ablate.analysis.sources import load
from ablate.analysis.fit import sigmoid


def _curve(n: int = 12, A: float = 0.6, C_mid: float = 40.0, R0: float = 0.1):
    steps = np.arange(0, n * 10, 10, dtype=float)
    return steps, sigmoid(np.maximum(steps, 1.0), A, 1.5, C_mid, R0)


# -- W&B CSV export --------------------------------------------------------------------------
def _wandb_csv(path, runs: dict[str, tuple[np.ndarray, np.ndarray]], metric="eval/acc",
               x="Step"):
    steps = sorted({s for st, _ in runs.values() for s in st})
    df = pd.DataFrame({x: steps})
    for run, (st, ys) in runs.items():
        col = pd.Series(dict(zip(st, ys)))
        for suffix in ("", "__MIN", "__MAX"):
            df[f"{run} - {metric}{suffix}"] = df[x].map(col)  # empty where the run has no point
    df.to_csv(path, index=False)


def test_wandb_csv_export_wide_one_column_per_run(tmp_path):
    s, y = _curve()
    p = tmp_path / "wandb_export_2026-01-01T10_00_00.csv"
    _wandb_csv(p, {"cispo-seed0": (s, y), "cispo-seed1": (s, y + 0.01),
                   "ppo-seed0": (s[:8], y[:8] - 0.05)})
    text = p.read_text().splitlines()[0]
    assert text.startswith('Step,cispo-seed0 - eval/acc,cispo-seed0 - eval/acc__MIN')
    cur = load(p)
    assert sorted(cur.variants()) == ["cispo", "ppo"]
    assert sorted(set(cur.frame["seed"])) == [0, 1]
    assert len(cur.frame) == 12 + 12 + 8  # ppo's empty cells are not points
    assert cur.y == "eval/acc" and cur.x == "step"
    assert "no compute metric found" in cur.notes[0]
    g = cur.frame[(cur.frame["variant"] == "cispo") & (cur.frame["seed"] == 1)]
    np.testing.assert_allclose(g["score"], y + 0.01)
    priced = load(p, step_cost=0.25)
    assert priced.x == "step x 0.25"
    np.testing.assert_allclose(sorted(set(priced.frame["compute"])), s * 0.25)


def test_wandb_csv_with_a_compute_x_axis_and_groups(tmp_path):
    s, y = _curve()
    p = tmp_path / "chart.csv"
    _wandb_csv(p, {"Group: prompt-avg": (s * 3.0, y)}, metric="val/pass_rate", x="gpu_hours")
    cur = load(p)
    assert cur.variants() == ["prompt-avg"] and cur.x == "gpu_hours"
    np.testing.assert_allclose(cur.frame["compute"], s * 3.0)
    assert "the chart's x axis" in cur.notes[0]


# -- MLflow tracking dir ---------------------------------------------------------------------
def _mlflow_run(exp_dir, run_id, name, metrics: dict[str, list[tuple[float, float]]],
                deleted=False):
    d = exp_dir / run_id
    (d / "tags").mkdir(parents=True)
    (d / "meta.yaml").write_text(
        f"artifact_uri: file://{d}/artifacts\nexperiment_id: '{exp_dir.name}'\n"
        f"lifecycle_stage: {'deleted' if deleted else 'active'}\nrun_id: {run_id}\n"
        f"run_name: {name}\nstatus: 3\n")
    (d / "tags" / "mlflow.runName").write_text(name)
    for key, pts in metrics.items():
        f = d / "metrics" / key
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("".join(f"{1700000000000 + i} {v} {int(st)}\n"
                             for i, (st, v) in enumerate(pts)))


def test_mlflow_file_store(tmp_path):
    s, y = _curve()
    root = tmp_path / "mlruns"
    exp = root / "412278134716925743"
    exp.mkdir(parents=True)
    (exp / "meta.yaml").write_text(f"artifact_location: file://{exp}\nexperiment_id: "
                                   f"'{exp.name}'\nlifecycle_stage: active\nname: loss_agg\n")
    (root / "0").mkdir()
    (root / "0" / "meta.yaml").write_text("experiment_id: '0'\nlifecycle_stage: active\n"
                                          "name: Default\n")
    for i, name in enumerate(["prompt_seed0", "prompt_seed1", "token_seed0"]):
        _mlflow_run(exp, f"{i:032x}", name, {
            "eval/pass_rate": list(zip(s, y + 0.01 * i)),
            "gpu_hours": list(zip(s, s / 10)),
            "train/loss": list(zip(s + 1, s))})
    _mlflow_run(exp, "f" * 32, "deleted_seed0", {"eval/pass_rate": [(0, 0.5)]}, deleted=True)
    cur = load(root)
    assert sorted(cur.variants()) == ["prompt", "token"]
    assert cur.x == "gpu_hours" and cur.y == "eval/pass_rate"
    g = cur.frame[(cur.frame["variant"] == "prompt") & (cur.frame["seed"] == 1)]
    np.testing.assert_allclose(g["score"], y + 0.01)
    np.testing.assert_allclose(g["compute"], s / 10)
    assert load(exp).variants() == cur.variants()  # one experiment's dir works too
    bad = exp / f"{0:032x}" / "metrics" / "gpu_hours"
    bad.write_text("1700000000000 oops 3\n")
    with pytest.raises(InputError, match=r"gpu_hours:1: expected 'timestamp value step'"):
        load(root)


# -- TensorBoard: verl and TRL tag names -----------------------------------------------------
def test_tensorboard_verl_tags(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    s, y = _curve()
    for exp, shift in (("grpo_seed0", 0.0), ("grpo_seed1", 0.01), ("dapo_seed0", 0.05)):
        w = SummaryWriter(str(tmp_path / "tensorboard_log" / "scaling" / exp))
        for step in range(0, int(s.max()) + 1):
            data = {"perf/total_num_tokens": 1000.0 + step, "critic/score/mean": 0.3,
                    "training/global_step": float(step), "timing_s/step": 2.0}
            if step % 10 == 0:  # verl validates every test_freq steps, logged with the rest
                i = step // 10
                data["val-core/openai/gsm8k/acc/mean@4"] = y[i] + shift
                data["val-aux/openai/gsm8k/reward/mean@4"] = 2 * y[i] - 1
            for k, v in data.items():
                w.add_scalar(k, v, step)
        w.close()
    cur = load(tmp_path / "tensorboard_log" / "scaling")
    assert sorted(cur.variants()) == ["dapo", "grpo"]
    assert cur.y == "val-core/openai/gsm8k/acc/mean@4"
    assert cur.x == "perf/total_num_tokens (running sum)"
    g = cur.frame[(cur.frame["variant"] == "grpo") & (cur.frame["seed"] == 1)]
    np.testing.assert_allclose(g["score"], y + 0.01, rtol=1e-6)
    # compute at step k = sum of the per-step token counts of steps 0..k
    np.testing.assert_allclose(g["compute"], [sum(1000.0 + t for t in range(int(k) + 1))
                                              for k in s], rtol=1e-6)


def test_tensorboard_verl_two_data_sources_is_ambiguous(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path / "exp"))
    for step in range(5):
        w.add_scalar("val-core/openai/gsm8k/acc/mean@1", 0.1 * step, step)
        w.add_scalar("val-core/math500/acc/mean@1", 0.05 * step, step)
    w.close()
    with pytest.raises(InputError, match=r"several score metrics fit; pass one of --y val-core/math500.* or --y val-core/openai/gsm8k"):
        load(tmp_path)
    assert load(tmp_path, y="val-core/math500/acc/mean@1").y == "val-core/math500/acc/mean@1"


def test_tensorboard_trl_tags(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    s, y = _curve()
    for run in ("grpo-cispo", "grpo-ppo"):
        # HF Trainer's TensorBoardCallback: <output_dir>/runs/<date_host>, "train/"/"eval/"
        w = SummaryWriter(str(tmp_path / run / "runs" / "Jan01_10-00-00_node7"))
        for i, step in enumerate(s):
            w.add_scalar("train/num_tokens", 5000.0 * (step + 5), step + 5)  # logging_steps
            w.add_scalar("train/reward", 0.2, step + 5)
            w.add_scalar("eval/reward", 2 * y[i], step)
            w.add_scalar("eval/rewards/accuracy_reward/mean", y[i], step)
            w.add_scalar("eval/rewards/format_reward/mean", 1.0, step)
        w.close()
    cur = load(tmp_path)
    assert sorted(cur.variants()) == ["grpo-cispo", "grpo-ppo"]
    assert cur.y == "eval/rewards/accuracy_reward/mean" and cur.x == "train/num_tokens"
    g = cur.frame[cur.frame["variant"] == "grpo-ppo"]
    # compute interpolated at the eval steps, inside the logged range only (step 0 precedes it)
    np.testing.assert_allclose(g["compute"], 5000.0 * s[1:], rtol=1e-6)
    np.testing.assert_allclose(g["score"], y[1:], rtol=1e-6)


# -- JSONL: verl's file logger, TRL/HF logs ----------------------------------------------------
def test_verl_file_logger_jsonl(tmp_path):
    s, y = _curve()
    for exp, shift in (("cispo_seed0", 0.0), ("cispo_seed1", 0.02)):
        lines = []
        for step in range(0, int(s.max()) + 1):
            data = {"perf/total_num_tokens": 100, "timing_s/step": 1.5,
                    "actor/pg_loss": -0.01}
            if step % 10 == 0:
                data["val-core/math_dapo/acc/mean@16"] = float(y[step // 10] + shift)
            lines.append(json.dumps({"step": step, "elapsed_seconds": 1.5 * step, "data": data}))
        (tmp_path / f"{exp}.jsonl").write_text("\n".join(lines) + "\n")
    cur = load(tmp_path)
    assert cur.variants() == ["cispo"] and sorted(set(cur.frame["seed"])) == [0, 1]
    assert cur.y == "val-core/math_dapo/acc/mean@16"
    g = cur.frame[cur.frame["seed"] == 1]
    np.testing.assert_allclose(g["score"], y + 0.02)
    np.testing.assert_allclose(g["compute"], 100.0 * (s + 1))
    one = load(tmp_path / "cispo_seed0.jsonl", x="step", step_cost=2.0)
    np.testing.assert_allclose(one.frame["compute"], 2.0 * s)
    (tmp_path / "cispo_seed0.jsonl").write_text('{"step": 0, "data": {"a": 1}}\n[1, 2]\n{"step"')
    with pytest.raises(InputError, match=r"cispo_seed0.jsonl:2: expected a JSON object"):
        load(tmp_path)


def test_trl_flat_jsonl_and_trainer_state(tmp_path):
    s, y = _curve()
    hist = []
    for i, step in enumerate(s):
        hist.append({"loss": 0.01, "reward": 0.3, "num_tokens": 800.0 * step, "epoch": 0.1,
                     "step": int(step)})
        hist.append({"eval_loss": 0.02, "eval_reward": float(2 * y[i] - 1),
                     "eval_rewards/accuracy_reward/mean": float(y[i]),
                     "eval_num_tokens": 800.0 * step, "epoch": 0.1, "step": int(step)})
    out = tmp_path / "out" / "grpo-run"
    (out / "checkpoint-110").mkdir(parents=True)
    (out / "checkpoint-110" / "trainer_state.json").write_text(json.dumps(
        {"global_step": 110, "log_history": hist}))
    (out / "checkpoint-50").mkdir()
    (out / "checkpoint-50" / "trainer_state.json").write_text(json.dumps(
        {"global_step": 50, "log_history": hist[:4]}))
    cur = load(tmp_path / "out")
    assert cur.variants() == ["grpo-run"]
    assert cur.y == "eval_rewards/accuracy_reward/mean" and cur.x == "num_tokens"
    np.testing.assert_allclose(cur.frame["score"], y)  # the longest log_history is used
    np.testing.assert_allclose(cur.frame["compute"], 800.0 * s)
    flat = tmp_path / "flat" / "grpo-run" / "metrics.jsonl"
    flat.parent.mkdir(parents=True)
    flat.write_text("".join(json.dumps(h) + "\n" for h in hist))
    cur2 = load(tmp_path / "flat")
    assert cur2.variants() == ["grpo-run"]  # metrics.jsonl is named by its folder
    np.testing.assert_allclose(cur2.frame["score"], y)


def test_long_tables_still_load_as_tables(tmp_path):
    df = pd.DataFrame({"variant": ["a"] * 6, "step": range(6), "compute": np.arange(1, 7.0),
                       "score": np.linspace(0.1, 0.5, 6)})
    p = tmp_path / "t.jsonl"
    df.to_json(p, orient="records", lines=True)
    cur = load(p)
    assert cur.x == "compute" and cur.notes == []
    conv = load(p, step_cost=2.0)  # --step-cost converts the step column, whatever the source
    assert conv.x == "step x 2" and conv.frame["compute"].tolist() == [0, 2, 4, 6, 8, 10]


@pytest.mark.slow
def test_cli_fit_reads_a_wandb_export_and_says_what_it_picked(tmp_path):
    s, y = _curve(n=20)
    p = tmp_path / "export.csv"
    _wandb_csv(p, {"cispo-seed0": (s, y), "cispo-seed1": (s, y + 0.005)})
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run([sys.executable, "-m", "ablate", "fit", str(p), "--step-cost", "0.5",
                        "--min-compute", "0", "--json"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [o["variant"] for o in out] == ["cispo"]
    assert abs(out[0]["A"] - 0.6) < 0.05
    r = subprocess.run([sys.executable, "-m", "ablate", "fit", str(p), "--step-cost", "0.5",
                        "--min-compute", "0"], capture_output=True, text=True, env=env)
    assert "score = 'eval/acc' (the only metric), compute = 'step x 0.5'" in r.stderr
    r = subprocess.run([sys.executable, "-m", "ablate", "fit", str(p), "--step-cost", "-1"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 2 and r.stderr.startswith("error: --step-cost -1")


def _history(path, evals=("eval/accuracy",)):
    """A W&B run-history export as a user downloads it: one row per step, `Step`, `run_name`
    with seeds, `_runtime`, train every 5 steps, evals every 20 (blank elsewhere)."""
    rng = np.random.default_rng(0)
    rows = []
    for run, a in (("cispo-seed0", 0.7), ("cispo-seed1", 0.71), ("ppo-seed0", 0.6)):
        for s in range(0, 400, 5):
            r = {"Step": s, "run_name": run, "_runtime": s * 3.1, "train/loss": 1 / (1 + s)}
            if s % 20 == 0:
                for i, e in enumerate(evals):
                    r[e] = 0.1 + (a - 0.1 - 0.1 * i) / (1 + (80 / max(s, 1)) ** 1.5) \
                        + rng.normal(0, 0.01)
            rows.append(r)
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


@pytest.mark.slow
def test_wandb_history_export_is_fitted_with_no_flags_or_refused_with_the_flags_to_add(tmp_path):
    from _cli import ablate

    src = _history(tmp_path / "history.csv")
    r = ablate("fit", src, "--json")
    assert r.returncode == 0, r
    fits = {o["variant"]: o for o in json.loads(r.stdout)}
    assert set(fits) == {"cispo", "ppo"} and fits["cispo"]["n_seeds"] == 2, fits
    assert fits["cispo"]["A"] == pytest.approx(0.705, abs=0.03)
    r = ablate("fit", src)
    assert "score = 'eval/accuracy'" in r.stderr and "--step-cost" in r.stderr, r
    r = ablate("fit", src, "--step-cost", 1e9)  # steps -> compute, whatever the source
    assert r.returncode == 0 and "step x 1e+09" in r.stdout + r.stderr, r
    two = _history(tmp_path / "two.csv", evals=("eval/accuracy_a", "eval/accuracy_b"))
    r = ablate("fit", two)
    assert r.returncode == 2 and r.stdout == "", r
    assert "--y eval/accuracy_a or --y eval/accuracy_b" in r.stderr, r


def test_an_empty_file_says_it_is_empty(tmp_path):
    from _cli import ablate

    for name in ("e.jsonl", "e.csv"):
        (tmp_path / name).write_text("")
        r = ablate("fit", tmp_path / name)
        assert r.returncode == 2 and "empty file" in r.stderr, r
