"""What the commands say, as a user meets them in a folder outside the repository (issue 41,
point 9): `ablate --help` says where to start; piped, `compare` writes no blank stderr line and
`status` of a failed study one table with each cause once, whole; `extrapolate --target`
describes a compute under its compute column; a CSV error names the line an editor shows."""

from __future__ import annotations

import json
import re

import pytest

from _cli import ablate
from _curves_util import curves_frame, write_study


def test_help_says_where_to_start(tmp_path):
    r = ablate("--help", cwd=tmp_path, columns=80)
    assert r.returncode == 0, r
    text = " ".join(r.stdout.split())
    assert "Start here: `ablate init`" in text and "ablate sweep study.yaml --wait" in text, text
    assert "ablate compare results/NAME" in text and "ablate compare LOG" in text, text
    assert max(len(x) for x in r.stdout.splitlines()) <= 80, r.stdout


def test_piped_compare_writes_no_blank_stderr_line(tmp_path):
    d = write_study(tmp_path, curves_frame(seeds=1, n_points=30))
    r = ablate("compare", d, cwd=tmp_path, columns=80, env={"COLUMNS": None})
    assert r.returncode == 0, r
    assert "" not in r.stderr.splitlines(), repr(r.stderr)


def test_extrapolate_target_says_its_interval_is_of_compute(tmp_path):
    d = write_study(tmp_path, curves_frame(seeds=1, n_points=30))
    r = ablate("extrapolate", d, "--target", "0.5", cwd=tmp_path, columns=100)
    assert r.returncode == 0, r
    text = " ".join(r.stdout.split())
    assert "95% interval" in text and "the compute where the fitted curve reaches" in text, text
    assert "run's score" not in text and "95% predictive" not in text, text
    j = json.loads(ablate("extrapolate", d, "--target", "0.5", "--json", cwd=tmp_path).stdout)
    assert j["interval"].startswith("95% interval of the compute"), j["interval"]


def _failed_study(tmp_path):
    d = tmp_path / "st"
    d.mkdir()
    runs = [("000000000000", "loss.type=ppo", {"state": "done", "step": 8}),
            ("000000000001", "loss.type=cispo",
             {"state": "failed", "step": 3, "error": "RuntimeError: CUDA out of memory: tried "
              "to allocate 2.00 GiB (GPU 0; 79.35 GiB total capacity; 77.10 GiB already "
              "allocated)"}),
            ("000000000002", "loss.type=grpo",
             {"state": "diverged", "step": 5, "reason": "non-finite loss or grad"})]
    (d / "variants.json").write_text(json.dumps([
        {"run_id": rid, "name": name, "seed": 0, "config": {}} for rid, name, _ in runs]))
    for rid, _, st in runs:
        (d / rid).mkdir()
        (d / rid / "status.json").write_text(json.dumps(st))
    return d


def test_piped_status_of_a_failed_study_one_table_each_cause_once_whole(tmp_path):
    d = _failed_study(tmp_path)
    (d / "_submitit").mkdir()  # named only where it exists (issue 52 point 4)
    r = ablate("status", d, cwd=tmp_path, env={"COLUMNS": None})
    assert r.returncode == 0, r
    out = r.stdout
    rules = [x for x in out.splitlines() if x.startswith("─")]
    heads = [x for x in out.splitlines() if x.startswith("run_id")]
    assert len(heads) == 1 and len(rules) == 1, out  # one table
    assert out.count("CUDA out of memory") == 1, out
    assert out.count("diverged loss.type=grpo seed 0: non-finite loss or grad at step 5") == 1, out
    # piped, the width is 100 (ablate/cli/width.py, issue 52): the cause cut there, whole
    # in --json
    # (a line naming a file is never cut: the path is whole, however long the tmp dir)
    assert max(len(x) for x in out.splitlines() if str(d) not in x) <= 100, out
    assert f"traceback: {d}/<run_id>/status.json" in out.splitlines(), out
    assert "77.10 GiB already allocated)" not in out and "(GPU..." in out, out
    whole = json.loads(ablate("status", d, "--json", cwd=tmp_path, env={"COLUMNS": None}).stdout)
    assert any("77.10 GiB already allocated)" in (x["error"] or "") for x in whole), whole
    assert "traceback: " in out and "job logs: " in out, out
    (d / "_submitit").rmdir()
    (d / "000000000001" / "status.json").unlink()  # now only the diverged run wrote one
    out = ablate("status", d, cwd=tmp_path, env={"COLUMNS": None}).stdout
    assert "job logs: " not in out and f"traceback: {d}/000000000002/status.json" in out, out
    at80 = ablate("status", "st", cwd=tmp_path, columns=80)  # as typed: results/NAME
    assert max(len(x) for x in at80.stdout.splitlines()) <= 80, at80.stdout


def test_a_csv_error_names_the_line_an_editor_shows(tmp_path):
    rows = ["variant,compute,score"] + [f"a,{i},0.{i:02d}" for i in range(1, 21)] + ["a,21,oops"]
    (tmp_path / "runs.csv").write_text("\n".join(rows) + "\n")
    r = ablate("compare", "runs.csv", cwd=tmp_path)
    assert r.returncode == 2, r
    assert "runs.csv: column 'score' line 22 is not a number ('oops')" in r.stderr, r
    assert (tmp_path / "runs.csv").read_text().splitlines()[21] == "a,21,oops"


@pytest.mark.parametrize("columns", [80, 100])
def test_compare_fits_the_width_and_keeps_each_number_with_its_interval(tmp_path, columns):
    """compare, from a folder outside the repository: no line over the width, no interval
    split over two lines, the value and both ends at one precision (never `[0.7532, 0.805]`),
    a column left out named (issue 41, point 8)."""
    d = write_study(tmp_path, curves_frame(seeds=2, n_points=40))
    r = ablate("compare", d.name, "--budget", "0.2", cwd=tmp_path, columns=columns)
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) <= columns, r.stdout
    cells = re.findall(r"(-?[\d.]+) \[(-?[\d.]+), (-?[\d.]+)\]", r.stdout)
    assert len(cells) >= 4, r.stdout  # A and a prediction for each of two variants
    for cell in cells:
        assert len({len(x.partition(".")[2]) for x in cell}) == 1, (cell, r.stdout)
    assert not [x for x in lines if re.search(r"\[[-\d.]+,\s*$", x)], r.stdout
    if columns == 80:
        assert "not shown at 80 columns:" in " ".join(r.stdout.split()), r.stdout


@pytest.mark.parametrize("columns", [80, 100])
def test_one_run_is_one_run_and_run_help_names_its_option(tmp_path, columns):
    (tmp_path / "one.yaml").write_text("name: one\nbase: proxy.yaml\n")
    r = ablate("sweep", "one.yaml", "--dry-run", "--executor", "local", "--results",
               tmp_path / "res", cwd=tmp_path, columns=columns)
    assert r.returncode == 0, r
    assert "one.yaml: 1 run" in r.stdout and "1 runs" not in r.stdout, r.stdout
    assert "study: 1 planned run," in " ".join(r.stdout.split()), r.stdout
    h = ablate("run", "--help", cwd=tmp_path, columns=columns)
    text = " ".join(h.stdout.split())
    assert "into the --out folder" in text and "RUN_DIR" not in text, h.stdout


@pytest.mark.slow
def test_status_of_a_mistyped_folder_says_no_such_folder_and_the_near_one(tmp_path):
    (tmp_path / "results" / "prj_a").mkdir(parents=True)
    r = ablate("status", "results/prj", cwd=tmp_path)
    assert r.returncode == 2, r
    assert r.stderr.strip() == "error: results/prj: no such folder; did you mean results/prj_a?", r
    (tmp_path / "results" / "empty").mkdir()
    err = ablate("status", "results/empty", cwd=tmp_path).stderr
    assert "not a study directory" in err and "no such folder" not in err, err


@pytest.mark.slow
@pytest.mark.parametrize("command", ["fit", "compare", "extrapolate", "plan", "report", "watch",
                                     "run", "sweep", "status", "tune"])
def test_help_names_no_source_file(tmp_path, command):
    """A pip user has no benchmarks/ or ablate/*.py to open: help names docs pages or options."""
    r = ablate(command, "--help", cwd=tmp_path, columns=200)
    assert r.returncode == 0, r
    text = " ".join(r.stdout.split())
    assert not re.search(r"[\w/]+\.py\b", text), re.findall(r"[\w/]+\.py\b", text)
    assert "RUN_DIR" not in text, text


@pytest.mark.slow
@pytest.mark.parametrize("columns", [80, 100])
def test_dry_run_table_fits_and_explains_only_columns_shown(tmp_path, columns):
    """Issue 52 point 2: no line past the width, and no footnote for a column left out."""
    r = ablate("sweep", "loss_agg.yaml", "--profile", "slurm_gpu", "--dry-run", cwd=tmp_path,
               columns=columns)
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) <= columns, max(lines, key=len)
    text = " ".join(r.stdout.split())
    hidden = re.search(r"not shown at \d+ columns: ([^(]+) \(see --json\)", text)
    for col in (hidden.group(1).split(", ") if hidden else []):
        assert f"{col}: " not in text.split("not shown at")[0].split("name ─")[-1], (col, text)
    assert "train: GiB per training GPU" in text, text
