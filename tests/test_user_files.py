"""Issue 32, as a user meets it: their own files (names and shapes as people write them), read by
the installed `ablate` console script in a subprocess, from a folder outside the repository, at
COLUMNS=100. Each file's curves are drawn from known sigmoids (tests/synthetic.py), so the test
knows which variant must win and roughly where its ceiling is."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import synthetic as sy
from _cli import ablate_script, console_script

ROOT = Path(__file__).resolve().parents[1]
HIGH, MID, LOW = (sy.Truth(0.66, 1.6, 0.01, 0.1), sy.Truth(0.55, 1.6, 0.01, 0.1),
                  sy.Truth(0.45, 1.6, 0.01, 0.1))


def ablate(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The console script, this tree's code, run from `cwd` (a folder outside the repo)."""
    if console_script() is None:
        pytest.skip("needs the installed `ablate` console script (pip install -e .)")
    return ablate_script(*args, cwd=cwd, tests_on_path=False)


def said(r: subprocess.CompletedProcess) -> str:
    """stderr with its lines joined (notes wrap at the terminal's 100 columns)."""
    return " ".join(r.stderr.split())


def _points(truth: sy.Truth, rng, n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    return sy.curve(truth, rng, c_max=0.05, n_points=n)


def _long(curves: dict[str, sy.Truth], seed: int, seeds: int = 2, col: str = "variant",
          scale=lambda y: y) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for v, tr in curves.items():
        for s in range(seeds):
            c, y = _points(tr, rng)
            rows += [{col: v, "seed": s, "compute": a, "score": scale(b)} for a, b in zip(c, y)]
    return pd.DataFrame(rows)


def _one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, r.stderr
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["None", "NA", "nan", "null", "N/A"])
def test_a_variant_named_like_a_missing_value_is_a_variant(tmp_path, name):
    """pandas reads these cells as missing: the best variant vanished (with numpy warnings)."""
    _long({name: HIGH, "ppo": MID, "grpo": LOW}, seed=1).to_csv(tmp_path / "runs.csv",
                                                                 index=False)
    r = ablate(tmp_path, "compare", "runs.csv", "--json")
    assert r.returncode == 0 and "Warning" not in r.stderr, r.stderr
    out = json.loads(r.stdout)
    rows = {x["variant"]: x for x in out["rows"]}
    assert set(rows) == {name, "ppo", "grpo"}
    assert rows[name]["rank"] == 1 and abs(rows[name]["A"] - HIGH.A) < 0.03
    assert out["answer"].startswith(f"{name} has the higher ceiling"), out["answer"]


@pytest.mark.slow
def test_a_file_whose_only_variant_is_nan_and_a_blank_name(tmp_path):
    _long({"nan": HIGH}, seed=2).to_csv(tmp_path / "one.csv", index=False)
    r = ablate(tmp_path, "fit", "one.csv", "--json")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    assert row["variant"] == "nan" and abs(row["A"] - HIGH.A) < 0.03
    df = _long({"cispo": HIGH, "ppo": MID}, seed=2)
    df.loc[7, "variant"] = ""  # a truly blank cell is no name: said, not pooled as "nan"
    df.to_csv(tmp_path / "blank.csv", index=False)
    line = _one_line_error(ablate(tmp_path, "fit", "blank.csv"))
    assert "blank.csv: column 'variant' line 9 is blank" in line, line  # as an editor shows


@pytest.mark.slow
def test_runs_in_a_run_column_are_the_variants(tmp_path):
    """Pooled into one curve named after the file before (A between the two)."""
    df = _long({"a": HIGH, "b": MID}, seed=3, seeds=1, col="run").drop(columns="seed")
    df.to_csv(tmp_path / "export.csv", index=False)
    r = ablate(tmp_path, "compare", "export.csv", "--json")
    assert r.returncode == 0, r.stderr
    rows = {x["variant"]: x for x in json.loads(r.stdout)["rows"]}
    assert set(rows) == {"a", "b"}
    assert abs(rows["a"]["A"] - HIGH.A) < 0.03 and abs(rows["b"]["A"] - MID.A) < 0.03
    assert "each value of 'run' is a variant" in said(r), r.stderr
    # a text column of another name: one curve, and stderr names the --by that splits it
    df.rename(columns={"run": "tag"}).to_csv(tmp_path / "tagged.csv", index=False)
    r = ablate(tmp_path, "fit", "tagged.csv")
    assert r.returncode == 0 and "pass --by tag" in said(r), r.stderr


@pytest.mark.slow
def test_seed_names_in_a_variant_column_pool_as_seeds(tmp_path):
    rng = np.random.default_rng(4)
    parts = []
    for v, tr in (("cispo", HIGH), ("ppo", MID)):
        for s in (0, 1):
            c, y = _points(tr, rng)
            parts.append(pd.DataFrame({"variant": f"{v}-seed{s}", "compute": c, "score": y}))
    pd.concat(parts).to_csv(tmp_path / "seeds.csv", index=False)
    r = ablate(tmp_path, "compare", "seeds.csv", "--json")
    assert r.returncode == 0, r.stderr
    rows = {x["variant"]: x for x in json.loads(r.stdout)["rows"]}
    assert set(rows) == {"cispo", "ppo"} and rows["cispo"]["n_seeds"] == 2, rows.keys()
    assert "pooled cispo (2 seeds), ppo (2 seeds)" in said(r), r.stderr


@pytest.mark.slow
def test_trl_rewards_in_minus_one_one_and_percent_scores(tmp_path):
    rng = np.random.default_rng(5)
    logs = tmp_path / "trl_out"
    logs.mkdir()
    for v, tr in (("cispo", HIGH), ("ppo", MID)):
        c, y = _points(tr, rng)
        with open(logs / f"{v}.jsonl", "w") as f:  # a TRL on_log dump: reward = 2 x correct - 1
            for i, (a, b) in enumerate(zip(c, y), 1):
                f.write(json.dumps({"step": i, "num_tokens": a * 1e9, "eval_reward": 2 * b - 1})
                        + "\n")
    line = _one_line_error(ablate(tmp_path, "compare", "trl_out"))
    assert "scores are pass rates in [0, 1]" in line and "--y-range -1 1" in line, line
    r = ablate(tmp_path, "compare", "trl_out", "--y-range", "-1", "1", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    rows = {x["variant"]: x for x in out["rows"]}
    assert out["y_range"] == [-1, 1] and out["y"] == "eval_reward"
    assert abs(rows["cispo"]["A"] - HIGH.A) < 0.04 and rows["cispo"]["rank"] == 1, rows
    _long({"cispo": HIGH, "ppo": MID}, seed=6, scale=lambda y: 100 * y).to_csv(
        tmp_path / "pct.csv", index=False)
    line = _one_line_error(ablate(tmp_path, "fit", "pct.csv"))
    assert "--y-range 0 100" in line, line
    r = ablate(tmp_path, "fit", "pct.csv", "--y-range", "0", "100", "--json")
    assert r.returncode == 0, r.stderr
    assert abs(json.loads(r.stdout)[0]["A"] - HIGH.A) < 0.03
    line = _one_line_error(ablate(tmp_path, "fit", "pct.csv", "--y-range", "0", "50"))
    assert "outside --y-range 0 50" in line, line


@pytest.mark.slow
def test_the_answer_leads_with_a_pinned_ceiling(tmp_path):
    """'slow' fits a higher A that its data does not hold (C_mid beyond the runs): the answer
    must not crown it, and must say what it would take to know."""
    _long({"slow": sy.Truth(0.85, 1.2, 0.08, 0.1), "fast": sy.Truth(0.6, 1.6, 0.008, 0.1)},
          seed=5).to_csv(tmp_path / "u.csv", index=False)
    r = ablate(tmp_path, "compare", "u.csv", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    rows = {x["variant"]: x for x in out["rows"]}
    assert rows["slow"]["verdict"] == "not bending yet: A unidentified", rows["slow"]
    assert rows["fast"]["verdict"] == "ok"
    answer = out["answer"]
    assert answer.startswith("fast"), answer
    m = re.search(r"slow may still rank higher, but its ceiling is not pinned .* it needs "
                  r"about ([0-9.e+-]+) compute", answer)
    assert m and float(m.group(1)) > 0.05, answer  # more than its runs used


def _lr_table(tmp_path: Path) -> None:
    _long({"optim.lr=0.3": MID, "optim.lr=1.0": HIGH}, seed=7).to_csv(tmp_path / "lr.csv",
                                                                       index=False)


@pytest.mark.slow
def test_labels_as_shown_and_one_json_object(tmp_path):
    _lr_table(tmp_path)
    r = ablate(tmp_path, "compare", "lr.csv", "--baseline", "1.0", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["baseline"] == "optim.lr=1.0" and out["version"] == 1
    # the baseline wins: the sentence names who beats whom, never a bare "P(beats)"
    assert "P(1.0 beats 0.3) 1.00" in out["answer"] and "P(beats)" not in out["answer"], out
    doc = (ROOT / "docs" / "JSON.md").read_text()
    for cmd, extra in (("compare", []), ("extrapolate", ["--budget", "1"]),
                       ("plan", ["--budget", "1"])):
        r = ablate(tmp_path, cmd, "lr.csv", "--baseline", "0.3", *extra, "--json")
        assert r.returncode == 0, r.stderr
        obj = json.loads(r.stdout)
        assert obj["command"] == cmd and obj["baseline"] == "optim.lr=0.3"
        assert {"answer", "margin", "window", "x", "y", "rows"} <= set(obj) and obj["answer"]
        for key in obj:  # every field is documented
            assert f"`{key}`" in doc, (cmd, key)


@pytest.mark.slow
def test_wide_at_100_columns_and_the_plot_is_said(tmp_path):
    _lr_table(tmp_path)
    r = ablate(tmp_path, "compare", "lr.csv", "--wide", "--plot", "fig.png")
    assert r.returncode == 0, r.stderr
    assert all(len(x) <= 100 for x in r.stdout.splitlines()), r.stdout
    for head in ("C_mid [95%]", "R0 [95%]", "R²", "points", "[95% predictive]"):
        assert head in r.stdout, r.stdout
    assert "not shown at 100" not in r.stdout, r.stdout
    heads = [x for x in r.stdout.splitlines() if x.startswith(("rank ", "variant "))]
    assert heads and not any("window" in h for h in heads), r.stdout  # one window: the caption
    assert "plot -> fig.png" in r.stderr and (tmp_path / "fig.png").stat().st_size > 10_000


@pytest.mark.slow
def test_trainer_state_in_the_current_folder_is_named_after_it(tmp_path):
    run = tmp_path / "qwen-grpo"
    run.mkdir()
    c, y = _points(HIGH, np.random.default_rng(8))
    hist = [{"step": i, "num_tokens": a * 1e9, "eval_reward": b}
            for i, (a, b) in enumerate(zip(c, y), 1)]
    (run / "trainer_state.json").write_text(json.dumps({"log_history": hist}))
    r = ablate(run, "fit", "trainer_state.json", "--json")
    assert r.returncode == 0, r.stderr
    assert [x["variant"] for x in json.loads(r.stdout)] == ["qwen-grpo"]


@pytest.mark.slow
def test_study_cache_is_readable_by_lab_mates_and_the_report_says_ok(tmp_path):
    from _curves_util import write_study

    d = write_study(tmp_path, _long({"cispo": HIGH, "ppo": MID}, seed=9))
    (d / "study.yaml").write_text("name: toy\naxes:\n  loss.type: [cispo, ppo]\n")
    r = ablate(tmp_path, "report", str(d), "--json")
    assert r.returncode == 0, r.stderr
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((d / "metrics.parquet").stat().st_mode) == 0o666 & ~umask
    page = (d / "report.html").read_text()
    assert re.search(r'<td class="l verdict">ok</td>', page), "verdict missing from the table"
    cmds = json.loads(r.stdout)["commands"]
    sweep = next(c for c in cmds if c.startswith("ablate sweep"))
    assert sweep.startswith(f"ablate sweep {(d / 'study.yaml').resolve()} "), cmds
