"""The forecast band reaches the dashboards from `ablate watch`'s side (issue 39 point 4, issue
41): a run logs to its trackers as the trainer does (trainer/trackers.py, which records where
in trackers.json), `ablate watch RUN` judges it, and the band each evaluation was held to is
read back from TensorBoard (tbparse) and from MLflow's file store beside the score, at the
steps the score was logged at. The trainer reads nothing of it; `ablate fit` still reads the
score alone."""

from __future__ import annotations

import glob
import json
from pathlib import Path

import numpy as np
import pytest
from _cli import ablate
from test_trackers import _need  # skips (fails under CI=true) without the package

import synthetic as sy
from trainer import rundir

pytestmark = pytest.mark.slow  # a watch fits sigmoids with intervals: seconds of CPU
BAND = ("eval/pass_rate_forecast_lo", "eval/pass_rate_forecast_median",
        "eval/pass_rate_forecast_hi")


def _logged_run(tmp_path: Path, backends: list[str], n: int = 60) -> Path:
    """A healthy run of a study folder: every evaluation in metrics.jsonl and in `backends`,
    logged through the trainer's trackers (steps 10 apart), then done."""
    from trainer import trackers
    from trainer.config import TrainConfig

    c, y = sy.curve(sy.Truth(0.65, 1.6, 0.12, 0.1), np.random.default_rng(1), n_points=n,
                    prompts=500, samples=4)
    run = tmp_path / "st" / "r0"
    run.mkdir(parents=True)
    rundir.write_identity(run, study="st", variant="g", seed=0)
    cfg = TrainConfig.model_validate({"logging": {"backends": backends}})
    for i in range(n):
        row = {"step": 10 * i, "gpu_hours": float(c[i]), "eval/pass_rate": float(y[i])}
        rundir.append_metrics(run, row)
        trackers.log_metrics(cfg, run, row)
    rundir.write_status(run, "done", 10 * (n - 1))
    trackers.close()
    return run


def _held_bands(run: Path) -> dict[int, tuple[float, float, float]]:
    """step -> (lo, median, hi) of the band each evaluation was held to: the run judged as
    `ablate watch` judges it (ablate.analysis.watch, its defaults), the verdict's own bands."""
    from ablate.analysis import watch, watch_store

    assert watch_store.read(run, "gpu_hours", "eval/pass_rate") is not None, "no forecast"
    rows = rundir.read_metrics(run)
    c = [r["gpu_hours"] for r in rows]
    j = watch.judge("r0", "g", 0, c, [r["eval/pass_rate"] for r in rows], renew=True,
                    with_today=False)
    step = {r["gpu_hours"]: r["step"] for r in rows}
    return {step[p.compute]: (p.lo, p.mid, p.hi) for p in j.points if np.isfinite(p.lo)}


def test_tensorboard_shows_the_band_beside_the_score_and_fit_still_reads_the_score(tmp_path):
    pytest.importorskip("tbparse")
    from tbparse import SummaryReader

    from ablate.analysis.sources import load

    run = _logged_run(tmp_path, ["tensorboard"])
    where = rundir.read_trackers(run)
    tb = Path(where["tensorboard"]["dir"])
    assert tb == (tmp_path / "st" / "tensorboard" / "g" / "seed0").resolve(), where
    for _ in range(2):  # a second look replaces the band's file, never adds one
        r = ablate("watch", run, cwd=tmp_path, columns=80)
        assert r.returncode == 0, r
        assert r.stderr == "", r
    assert len(glob.glob(str(tb / "*.ablate-watch"))) == 1
    sc = SummaryReader(str(tb)).scalars
    want = _held_bands(run)
    assert len(want) >= 10, want
    for k, name in enumerate(BAND):
        got = sc[sc["tag"] == name].sort_values("step")
        assert got["step"].tolist() == sorted(want), (name, got)
        np.testing.assert_allclose(got["value"], [want[s][k] for s in sorted(want)], rtol=1e-6)
    score = sc[sc["tag"] == "eval/pass_rate"]
    assert len(score) == 60 and set(want) <= set(score["step"])  # beside the score's steps
    assert load(tmp_path / "st" / "tensorboard").y == "eval/pass_rate"  # the band is no score


def test_mlflow_gets_the_band_series_once_per_step(tmp_path):
    _need("mlflow")
    run = _logged_run(tmp_path, ["mlflow"])
    for _ in range(2):  # the second look finds nothing new: nothing sent twice
        r = ablate("watch", run, cwd=tmp_path, columns=100)
        assert r.returncode == 0 and r.stderr == "", r
    want = _held_bands(run)
    (hi,) = glob.glob(str(tmp_path / "st" / "mlruns" / "*" / "*" / "metrics" / "eval" /
                          "pass_rate_forecast_hi"))
    got = [(int(s), float(v)) for _, v, s in (ln.split() for ln in open(hi).read().splitlines())]
    assert [s for s, _ in got] == sorted(want), got
    np.testing.assert_allclose([v for _, v in got], [want[s][2] for s in sorted(want)],
                               rtol=1e-6)
    from ablate.analysis.sources import load

    assert load(tmp_path / "st" / "mlruns").y == "eval/pass_rate"


def test_a_run_without_trackers_gets_none_and_a_missing_tracker_is_one_line(tmp_path):
    run = _logged_run(tmp_path, [])
    assert rundir.read_trackers(run) == {}
    r = ablate("watch", run, cwd=tmp_path)
    assert r.returncode == 0 and r.stderr == "", r
    rundir.write_trackers(run, {"mlflow": {"tracking_uri": (tmp_path / "gone").as_uri(),
                                           "run_id": "0" * 32}})
    r = ablate("watch", run, cwd=tmp_path)
    assert r.returncode == 0, r  # a dashboard never stops the watch
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "forecast band not drawn in mlflow" in lines[0], r
    assert json.loads((run / "watch.json").read_text())["axes"], "the verdict is kept"
