"""`ablate fit / compare / extrapolate` end to end through the real entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import synthetic as sy

from _curves_util import curves_frame, run_cli, write_study

KEYS = {"variant", "A", "B", "C_mid", "R0", "A_ci", "B_ci", "C_mid_ci", "r2", "n_points",
        "window", "skipped", "method", "warnings"}


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    p = tmp_path_factory.mktemp("cli") / "curves.csv"
    curves_frame(seeds=2, n_points=50).to_csv(p, index=False)
    return p


def test_fit_json_matches_contract(table, capsys):
    code, out, err = run_cli(["fit", table, "--json"], capsys)
    assert code == 0, err
    rows = json.loads(out)
    assert [r["variant"] for r in rows] == ["cispo", "ppo"]
    for r in rows:
        assert KEYS <= set(r)
        assert r["A_ci"][0] <= r["A"] <= r["A_ci"][1]
        # on the sigmoid from compute 0: the shared shape-based window keeps every point
        assert r["n_points"] == 2 * 50 and r["skipped"] == 0 and r["window_rule"] == "shared"
        assert r["window"][0] > 0 and r["window"][1] == pytest.approx(0.05)
        assert r["method"] == "default" and r["warnings"] == []
    assert abs(rows[0]["A"] - 0.66) < 0.03 and abs(rows[1]["A"] - 0.55) < 0.03


@pytest.mark.slow
def test_fit_table_and_paper_method(table, capsys):
    code, out, _ = run_cli(["fit", table, "--method", "paper", "--min-compute", "0.01"], capsys)
    assert code == 0 and "cispo" in out and "ppo" in out and "A [95%]" in out


@pytest.mark.slow
def test_compare_ranks_and_uses_margin_rule(tmp_path, capsys):
    truths = {"base": sy.Truth(0.60, 1.2, 0.012, 0.1), "fast": sy.Truth(0.605, 2.2, 0.008, 0.1),
              "low": sy.Truth(0.50, 1.5, 0.01, 0.1)}
    d = write_study(tmp_path, curves_frame(seeds=1, n_points=60, truths=truths, seed=1))
    plot = tmp_path / "cmp.png"
    code, out, err = run_cli(["compare", d, "--baseline", "base", "--json", "--plot", plot], capsys)
    assert code == 0, err
    obj = json.loads(out)
    assert obj["version"] == 1 and obj["baseline"] == "base" and obj["margin"] == 0.02
    rows = {r["variant"]: r for r in obj["rows"]}
    assert rows["low"]["rank"] == 3 and rows["low"]["p_beats_baseline"] < 0.05
    assert rows["fast"]["rank"] == 1  # tied A (margin 0.02): higher B at the shared A wins
    assert "shared A" in rows["fast"]["note"]
    assert rows["fast"]["p_beats_baseline"] > 0.9
    assert rows["base"]["p_beats_baseline"] is None
    assert plot.stat().st_size > 10_000
    code, out, _ = run_cli(["compare", d, "--margin", "0"], capsys)  # plain A ranking
    head = " ".join(out.split("────")[0].split())  # the header, as folded at the width
    assert code == 0 and "P(beats" in head and "base)" in head, out


def test_extrapolate_budget_target_and_recommendation(table, capsys):
    code, out, _ = run_cli(["extrapolate", table, "--budget", "0.2", "--json"], capsys)
    obj = json.loads(out)
    assert obj["command"] == "extrapolate" and obj["budget"] == 0.2 and "predictive" in obj["interval"]
    assert obj["answer"].startswith("cispo is predicted highest")
    rows = obj["rows"]
    assert code == 0 and {r["variant"] for r in rows} == {"cispo", "ppo"}
    for r in rows:
        assert r["budget"] == 0.2 and r["ci"][0] <= r["score"] <= r["ci"][1]
    assert [r["variant"] for r in rows if r["recommended"]] == ["cispo"]
    code, out, _ = run_cli(["extrapolate", table, "--target", "0.6", "--json"], capsys)
    rows = {r["variant"]: r for r in json.loads(out)["rows"]}
    assert rows["cispo"]["compute"] > 0
    assert rows["ppo"]["compute"] is None
    assert rows["ppo"]["note"].startswith("not reachable: above A's upper bound")


def test_a_failed_variant_is_reported_not_dropped(tmp_path, capsys):
    df = curves_frame(seeds=1, n_points=40)
    flat = df[df["variant"] == "ppo"].copy()
    flat["variant"], flat["score"] = "flat", 0.3
    p = tmp_path / "t.csv"
    import pandas as pd

    pd.concat([df, flat]).to_csv(p, index=False)
    code, out, _ = run_cli(["compare", p, "--json"], capsys)
    rows = {r["variant"]: r for r in json.loads(out)["rows"]}
    assert code == 0 and rows["flat"]["rank"] is None and "flat or decreasing" in rows["flat"]["error"]
    code, out, _ = run_cli(["fit", p], capsys)
    assert "flat or decreasing" in out


@pytest.mark.parametrize("args, msg", [
    (["fit", "{d}/missing.csv"], "no such file"),
    (["fit", "{t}", "--y", "reward"], "no column 'reward' for --y"),
    (["fit", "{t}", "--method", "magic"], "--method 'magic'"),
    (["fit", "{t}", "--min-compute", "1", "--max-compute", "0.5"], "must be below"),
    (["compare", "{t}", "--baseline", "nope"], "--baseline 'nope': no such variant"),
    (["compare", "{t}", "--plot", "{d}/fig.pdf"], "must be a .png"),
    (["extrapolate", "{t}"], "exactly one of --budget"),
    (["extrapolate", "{t}", "--target", "1.5"], "strictly between 0 and 1"),
    (["fit", "{nan}"], "NaN/inf"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, table, capsys, args, msg):
    short = tmp_path / "short.csv"
    short.write_text("variant,compute,score\na,1,0.1\na,2,0.2\na,3,0.3\n")
    nan = tmp_path / "nan.csv"
    nan.write_text("variant,compute,score\n" + "".join(f"a,{i},{0.1 + i / 100}\n" for i in range(9))
                   + "a,10,inf\n")
    before = set(tmp_path.iterdir())
    fmt = {"d": tmp_path, "t": table, "short": short, "nan": nan}
    code, out, err = run_cli([a.format(**fmt) for a in args] + ["--json"], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0] and "Traceback" not in err
    assert set(tmp_path.iterdir()) == before


@pytest.mark.parametrize("command", ["fit", "compare"])
def test_curves_too_short_to_fit_are_not_yet_exit_3_not_bad_input(tmp_path, capsys, command):
    """A well-formed log whose curves cannot be fit yet (3 evaluations) is "not yet" (exit 3,
    docs/JSON.md), so a script polling an early study can tell it from a broken file (exit 2);
    the JSON answer still comes, with each variant's reason."""
    short = tmp_path / "short.csv"
    short.write_text("variant,compute,score\na,1,0.1\na,2,0.2\na,3,0.3\n")
    before = set(tmp_path.iterdir())
    code, out, err = run_cli([command, short, "--json"], capsys)
    assert code == 3, (code, err)
    (line,) = err.strip().splitlines()
    assert line.startswith("not yet: no variant could be fit yet") and "only 3 point" in line
    rows = json.loads(out) if command == "fit" else json.loads(out)["rows"]
    assert [r["variant"] for r in rows] == ["a"] and "only 3 point" in rows[0]["error"]
    assert set(tmp_path.iterdir()) == before


def test_bad_study_column_writes_no_cache(tmp_path, capsys):
    d = write_study(tmp_path, curves_frame(seeds=1, n_points=10))
    code, _, err = run_cli(["fit", d, "--x", "wall_hours"], capsys)
    assert code == 2 and "no column 'wall_hours'" in err and not (d / "metrics.parquet").exists()


@pytest.mark.slow
def test_console_script_exit_code_and_help(table):
    r = subprocess.run([sys.executable, "-m", "ablate", "extrapolate", str(table), "--budget",
                        "-1"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--budget" in r.stderr
    h = subprocess.run([sys.executable, "-m", "ablate", "compare", "--help"], capture_output=True,
                       text=True)
    assert h.returncode == 0 and "--margin" in h.stdout and "--baseline" in h.stdout
