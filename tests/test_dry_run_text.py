"""`ablate sweep --dry-run` as a user reads it, from a folder outside the repository, at 80
and 100 columns (issue 41, point 8): no line wider than the terminal, every variant name whole
on one line (a grid's `axis=value,axis=value` included), the columns that gave way named; and a
CPU study's plan speaks of CPUs (RAM per process, CPU-hours, no CUDA context), with a job that
holds the whole budget said as such rather than as a step count per job."""

from __future__ import annotations

import pytest
from _cli import ablate

GRID = """\
name: grid
base: proxy.yaml
axes:
  off_policy.mode: [pipeline, ppo_off_policy]
  loss.aggregation: [token, sample]
seeds: [0]
budget: {steps: 600}
profile: local
"""
NAMES = ["off_policy.mode=pipeline,loss.aggregation=token",
         "off_policy.mode=ppo_off_policy,loss.aggregation=sample"]


@pytest.mark.parametrize("columns", [80, 100])
def test_a_cpu_grids_dry_run_fits_the_width_names_whole(tmp_path, columns):
    (tmp_path / "grid.yaml").write_text(GRID)
    r = ablate("sweep", "grid.yaml", "--dry-run", cwd=tmp_path, columns=columns)
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) <= columns, [x for x in lines if len(x) > columns]
    for name in NAMES:  # on one line with its run id, whole
        assert any(x.rstrip().endswith(name) and x[:12].isalnum() for x in lines), (name, r)
    text = " ".join(r.stdout.split())
    assert f"not shown at {columns} columns:" in text and "(see --json)" in text, r.stdout
    # a CPU plan speaks of CPUs
    hidden = text.split(f"not shown at {columns} columns:")[1].split("(see --json)")[0]
    # the train column's note goes with the column (issue 52 point 2)
    assert ("GiB of RAM per training process" in text) == ("train," not in hidden), text
    assert "CPU-hours" in text, text
    assert "Resource plan per CPU process (RAM)" in text and "on CPU" in text, text
    for gpu_word in ("per training GPU", "CUDA context", "GiB/GPU", "GPU-h", "device-hours"):
        assert gpu_word not in text, (gpu_word, text)
    assert "all 600 steps in one job, no requeue needed" in text, text
    assert "steps kept per job" not in text, text
    assert list(tmp_path.iterdir()) == [tmp_path / "grid.yaml"]  # a dry run writes nothing


def test_piped_with_no_columns_it_fits_100_columns_one_line_a_run(tmp_path):
    """Piped with no COLUMNS, the width is 100 (ablate/cli/width.py, issue 52): the plan's
    paragraphs fold at words, each run stays one line with its id and whole name (grep), the
    columns that gave way are named."""
    (tmp_path / "grid.yaml").write_text(GRID)
    r = ablate("sweep", "grid.yaml", "--dry-run", cwd=tmp_path, env={"COLUMNS": None})
    assert r.returncode == 0, r
    lines = r.stdout.splitlines()
    assert max(len(x) for x in lines) <= 100, [x for x in lines if len(x) > 100]
    for name in NAMES:
        assert any(x.rstrip().endswith(name) and x[:12].isalnum() for x in lines), (name, r)
    assert "not shown at 100 columns:" in " ".join(r.stdout.split()), r.stdout
