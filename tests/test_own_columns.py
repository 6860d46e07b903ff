"""A user's own messy logs, read with the installed console script from a folder outside the
repository (issue 51 point 6): --by/--x/--y take the file's own names (dotted or slashed), a
plain CSV is not announced as another tool's export, its score and compute are found as a
JSONL log's are and said in one line, a token count beats the step as compute, and a loss
given as the score gets a hint about losses."""

from __future__ import annotations

import json

import numpy as np
import pytest

from _cli import ablate_script

A = {"cispo": 0.70, "dapo": 0.58}


def _points(rng):
    for v, a in A.items():
        for seed in range(2):
            for step in range(10, 410, 10):
                y = 0.05 + (a - 0.05) / (1 + (120 / step) ** 1.3) + rng.normal(0, 0.01)
                yield f"{v}-seed{seed}", step, float(np.clip(y, 0, 1))


def _one_error_line(r) -> str:
    assert r.returncode == 2 and r.stdout == "", (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and r.stderr.count("\n") == 1, r.stderr
    return r.stderr


@pytest.mark.slow
def test_a_plain_csv_by_its_own_run_column(tmp_path):
    rows = ["run,step,gpu_hours,pass_rate"] + [f"{run},{s},{s * 0.5},{y:.4f}"
                                               for run, s, y in _points(np.random.default_rng(0))]
    (tmp_path / "runs.csv").write_text("\n".join(rows) + "\n")
    r = ablate_script("fit", "runs.csv", "--by", "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "W&B" not in r.stderr, r.stderr  # a plain CSV, not another tool's export
    said = [x for x in r.stderr.splitlines() if "score = " in x]
    assert said == ["runs.csv: score = 'pass_rate' (auto-detected), compute = 'gpu_hours' "
                    "(auto-detected)"], r.stderr
    assert "pooled cispo (2 seeds), dapo (2 seeds)" in " ".join(r.stderr.split()), r.stderr
    assert "sigmoid fits: pass_rate vs gpu_hours" in r.stdout, r.stdout


@pytest.mark.slow
def test_a_jsonl_log_tokens_dotted_names_and_a_loss(tmp_path):
    rng = np.random.default_rng(1)
    with open(tmp_path / "log.jsonl", "w") as f:
        for run, s, y in _points(rng):
            f.write(json.dumps({"run": run, "step": s, "tokens": s * 4096,
                                "eval": {"math": {"accuracy": y}}, "train/loss": 2 - y}) + "\n")
    r = ablate_script("fit", "log.jsonl", "--y", "eval.math.accuracy", "--by", "run",
                      cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stderr.split())
    assert "score = 'eval/math/accuracy' (as given), compute = 'tokens' (auto-detected)" \
        in text, r.stderr  # tokens, not the step
    assert "pooled runs of cispo, dapo" in text, r.stderr  # each line's own run
    assert "JSONL log: score = " in text and "verl" not in text, r.stderr  # no one's format
    err = _one_error_line(ablate_script("fit", "log.jsonl", "--y", "train/loss", cwd=tmp_path))
    assert "reads as a loss (lower is better)" in err and "percent" not in err, err


@pytest.mark.slow
def test_a_csv_with_dotted_headers_takes_slashed_names(tmp_path):
    rng = np.random.default_rng(2)
    rows = ["arm,seed,step,eval.math.accuracy,samples"] + [
        f"{run.split('-')[0]},{run[-1]},{s},{y:.4f},{s * 64}" for run, s, y in _points(rng)]
    (tmp_path / "sheet.csv").write_text("\n".join(rows) + "\n")
    r = ablate_script("fit", "sheet.csv", "--by", "arm", "--y", "eval/math/accuracy",
                      cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "compute = 'samples' (auto-detected)" in " ".join(r.stderr.split()), r.stderr
    assert all(f"\n{v} " in r.stdout for v in A), r.stdout
    err = _one_error_line(ablate_script("fit", "sheet.csv", "--by", "Arm", cwd=tmp_path))
    assert "no column 'Arm' for --by; columns: arm, seed, step, eval.math.accuracy" in err, err
