"""`ablate plan`: the variant to scale at a budget, how far, and the regret of the choice."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from _study_util import cli
from ablate.analysis.fit import sigmoid
from synthetic import Truth, curve

# A fast recipe with a low ceiling and a slow one with a high ceiling: which to scale depends on
# the budget (the paper's point: a fast start is not a high ceiling).
FAST = Truth(A=0.50, B=2.0, C_mid=0.05, R0=0.1)
SLOW = Truth(A=0.70, B=1.2, C_mid=0.6, R0=0.1)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    rows = []
    rng = np.random.default_rng(0)
    for name, tr in (("fast", FAST), ("slow", SLOW)):
        for seed in (0, 1):
            c, y = curve(tr, rng, c_max=1.0, n_points=60)
            rows += [{"variant": name, "seed": seed, "compute": a, "score": b} for a, b in zip(c, y)]
    path = tmp_path_factory.mktemp("plan") / "curves.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _plan(table, budget: float, *extra: str) -> dict:
    r = cli("plan", str(table), "--budget", str(budget), "--json", *extra)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.mark.parametrize("budget", [0.15, 20.0])
def test_plan_recommends_the_truly_better_variant_at_the_budget(table, budget):
    truth = {n: float(sigmoid(budget, t.A, t.B, t.C_mid, t.R0)) for n, t in (("fast", FAST), ("slow", SLOW))}
    out = _plan(table, budget)
    assert out["recommended"] == max(truth, key=truth.get)
    rows = {r["variant"]: r for r in out["rows"]}
    rec = rows[out["recommended"]]
    assert rec["recommended"] and out["expected_regret"] == rec["expected_regret"]
    assert all(r["expected_regret"] >= rec["expected_regret"] >= 0 for r in rows.values())
    assert sum(r["p_best"] for r in rows.values()) == pytest.approx(1.0)
    for n, r in rows.items():
        lo, hi = r["ci"]
        assert lo <= r["score"] <= hi and abs(r["score"] - truth[n]) < 0.06
        assert r["scale_to"] <= budget + 1e-12
        assert r["score_at_scale_to"] >= r["score"] - out["tol"] - 1e-9
        assert r["extra_compute"] == pytest.approx(max(0.0, r["scale_to"] - r["observed"]))


def test_plan_says_when_scaling_further_buys_little(table):
    out = _plan(table, 1e6, "--tol", "0.01")
    fast = next(r for r in out["rows"] if r["variant"] == "fast")
    assert fast["scale_to"] < 1e6 / 100  # saturated long before the budget


@pytest.mark.slow
def test_plan_table_and_plot(table, tmp_path):
    png = tmp_path / "plan.png"
    r = cli("plan", str(table), "--budget", "20", "--plot", str(png))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "recommended: slow" in r.stdout and png.stat().st_size > 10_000
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, msg", [(["--budget", "0"], "--budget 0.0: must be"),
                                       (["--budget", "1", "--tol", "-1"], "--tol -1.0"),
                                       (["--budget", "1", "--plot", "x.svg"], ".png")])
def test_plan_bad_input_exits_2(table, args, msg):
    r = cli("plan", str(table), *args)
    assert r.returncode == 2 and msg in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
