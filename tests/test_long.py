"""Curves at the size real logs have (issue 13): trust verdicts, binning, repeated steps, and the
progress bar. Curves are built here (synthetic, in the shapes published runs have)."""

from __future__ import annotations

import io
import json
import time

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

import synthetic as sy
from ablate.analysis import fit_trust as trust
from ablate.cli.delayed_progress import delayed_progress
from ablate.analysis.fit import sigmoid
from ablate.analysis.fitters import bin_series, fit_sigmoid
from ablate.errors import InputError
from ablate.analysis.sources import dedupe

from _curves_util import run_cli


def _long(seed: int, n: int = 1000, **kw):
    rng = np.random.default_rng(seed)
    tr = sy.Truth(A=0.62, B=1.4, C_mid=0.15, R0=0.1)
    return (tr, *sy.curve(tr, rng, c_max=1.0, n_points=n, **kw))


@pytest.mark.slow
def test_a_1000_point_run_gets_honest_intervals_and_an_ok_verdict():
    tr, c, y = _long(0)
    f = fit_sigmoid(c, y)
    assert f.n_points == 1000 and f.interval_method == "bootstrap"
    assert f.ci["A"][0] <= tr.A <= f.ci["A"][1]
    assert trust.assess(f)[0] == "ok"


@pytest.mark.slow  # a 1,000-point fit, a bootstrap: 1.3-1.5 s CPU (> half the fast limit)
def test_binning_averages_consecutive_points_and_keeps_the_answer():
    tr, c, y = _long(1)
    full = fit_sigmoid(c, y, intervals=False)  # its A only: no bootstrap (the fast tier's CPU)
    b = fit_sigmoid(c, y, bins=100, n_boot=200)
    assert b.n_points == 100 and b.binned_from == 1000 and full.binned_from is None
    assert abs(b.A - full.A) < 0.01
    assert b.ci["A"][0] <= tr.A <= b.ci["A"][1]
    # bins are equal-count runs of consecutive points: their means, in order
    x, yy, s = bin_series(np.log(c[1:]), y[1:], np.zeros(1000, int), 100)
    assert x.size == 100 and np.all(np.diff(x) > 0)
    assert yy[0] == pytest.approx(y[1:11].mean())
    with pytest.raises(InputError, match="bins"):
        fit_sigmoid(c, y, bins=2)


def test_verdicts_name_what_is_wrong():
    rng = np.random.default_rng(2)
    # not bending: the run ends near C_mid (the curve is at half its gain)
    tr = sy.Truth(A=0.7, B=1.2, C_mid=0.9, R0=0.1)
    c, y = sy.curve(tr, rng, c_max=1.0, n_points=100)
    v, why, _ = trust.assess(fit_sigmoid(c, y))
    assert v.startswith("not bending yet") or v == "A at bound", (v, why)
    # too noisy: evaluation noise sd 0.08 on a rise of 0.25 (a small eval set, one sample)
    c = np.linspace(0, 1, 61)
    y = np.clip(sigmoid(c, 0.45, 1.5, 0.2, 0.2)
                + np.random.default_rng(0).normal(0, 0.08, c.size), 0, 1)
    v, why, _ = trust.assess(fit_sigmoid(c, y))
    assert v.startswith("too noisy: R^2"), (v, why)
    # too short: 7 evaluations after compute 0
    c, y = sy.curve(sy.Truth(0.6, 1.5, 0.2, 0.1), rng, c_max=1.0, n_points=7)
    v, why, _ = trust.assess(fit_sigmoid(c, y))
    assert v == "too short: 7 points" and "evaluate more often" in why


def test_a_refused_fit_has_a_verdict_too():
    v, why = trust.refused("unidentified",
                           "A and C_mid are not identified (C_mid ran to its limit): train longer")
    assert v == "not bending yet: A unidentified" and "train longer" in why


def test_repeated_steps_dropped_or_last_kept():
    f = pd.DataFrame({"variant": "a", "seed": 0, "compute": [1.0, 2.0, 2.0, 3.0, 3.0, 4.0],
                      "score": [0.1, 0.2, 0.2, 0.3, 0.35, 0.4]})
    out, notes = dedupe(f)
    assert out["compute"].tolist() == [1.0, 2.0, 3.0, 4.0]
    assert out.loc[out["compute"] == 3.0, "score"].item() == 0.35  # the re-logged value
    assert any("dropped 1 duplicate" in n for n in notes)
    assert any("kept the last" in n for n in notes)
    same, none = dedupe(f.drop_duplicates(["compute"], keep="last"))
    assert none == [] and len(same) == 4


@pytest.mark.slow  # a 400-point fit with its bootstrap: 0.8-1.1 s CPU (> half the fast limit)
def test_cli_verdict_bin_and_duplicates(tmp_path, capsys):
    tr, c, y = _long(3, n=400)
    df = pd.DataFrame({"variant": "long", "compute": c, "score": y})
    df = pd.concat([df, df.iloc[100:110]], ignore_index=True)  # an export that appended rows
    p = tmp_path / "runs.csv"
    df.to_csv(p, index=False)
    code, out, err = run_cli(["fit", p, "--json", "--bin", "50"], capsys)
    assert code == 0, err
    row = json.loads(out)[0]
    assert row["verdict"] == "ok" and row["verdict_reason"]
    assert row["n_points"] == 50 and row["binned_from"] == 400  # compute 0 is R0, not a fit point
    assert "dropped 10 duplicate rows" in " ".join(err.split())  # folded at the width
    code, out, err = run_cli(["fit", p], capsys)
    assert code == 0 and "verdict" in out and "ok" in out
    code, out, err = run_cli(["fit", p, "--bin", "3"], capsys)
    assert code == 2 and "--bin 3" in err


def test_progress_bar_appears_only_after_the_delay():
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=80)
    with delayed_progress(con, delay=60) as bar:  # ends long before its delay, however busy
        bar.add_task("quick", total=1)
    assert buf.getvalue() == ""  # finished before the delay: nothing shown
    with delayed_progress(con, delay=0.1) as bar:
        t = bar.add_task("slow fit", total=1)
        deadline = time.monotonic() + 60  # the delay's timer thread, on a busy machine
        while not bar.live.is_started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert bar.live.is_started, "the bar never appeared"
        bar.advance(t)
    assert "slow fit" in buf.getvalue()
