"""Issue 51 points 2, 3 and 5 as a user meets them (point 7): the installed `ablate` console
script, from a folder outside this repository, on a messy log of their own and on a results
folder typed one level too high.

The log: a CSV whose runs start late (the first evaluation at 15% of the compute), rows out of
order, CRLF line ends, training rows with a blank score, an extra text column; its "T=0.3" runs
rose to ~0.80 and fell ~0.11 (the quickstart's cold variant), its "T=1.0" runs did not."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _cli import ablate_script
from _curves_util import write_study
from _sag_curves import sag_frame

pytestmark = pytest.mark.slow  # the console script in subprocesses


def _messy_csv(path: Path) -> Path:
    f = sag_frame(late=True).replace({"variant": {"hot": "T=1.0", "cold": "T=0.3"}})
    f["note"] = "eval"
    train = f.sample(frac=0.3, random_state=1).assign(score=np.nan, note="train step")
    f = pd_concat([f, train]).sample(frac=1.0, random_state=2)  # rows out of order
    path.write_bytes(f.to_csv(index=False).replace("\n", "\r\n").encode())
    return path


def pd_concat(frames):
    import pandas as pd

    return pd.concat(frames, ignore_index=True)


def test_a_messy_late_log_names_the_sag_everywhere(tmp_path):
    log = _messy_csv(tmp_path / "my runs.csv")
    r = ablate_script("compare", log.name, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    said = " ".join(r.stdout.split())
    assert "peaked and fell (seed 0: 0.8" in said and "fell" in said, r.stdout
    r = ablate_script("extrapolate", log.name, "--target", "0.8", "--json", cwd=tmp_path,
                      timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    rows = {x["variant"]: x for x in json.loads(r.stdout)["rows"]}
    cold = rows["T=0.3"]
    assert cold["reached"] is not None and cold["compute"] == cold["reached"]["compute"], cold
    assert "reached (observed)" in cold["note"] and "fell from its peak" in cold["note"], cold
    r = ablate_script("watch", log.name, "--json", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    got = json.loads(r.stdout)
    fell = {(o["variant"], o["seed"]) for o in got if o["fell"]}
    assert fell == {("T=0.3", 0), ("T=0.3", 1)}, [(o["run"], o["verdict"], o["fell"])
                                                  for o in got]
    assert all(o["verdict"] in ("behind", "departed") for o in got if o["fell"]), got


def test_a_results_folder_one_level_off_is_its_study_for_watch_report_and_status(tmp_path):
    d = write_study(tmp_path / "results", sag_frame(), "quick")
    r = ablate_script("watch", "results", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert len(list(d.glob("*/watch.json"))) == 4, r.stdout  # the run dirs were found
    r = ablate_script("report", "results", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    page = (d / "report.html").read_text()
    assert "fell 0.8" in page and "peaked and fell" in page
    r = ablate_script("status", "results/quick", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    cold = [line for line in r.stdout.splitlines() if " cold " in line]
    assert len(cold) == 2 and all("fell 0.8" in line for line in cold), r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 100, r.stdout
