"""`ablate watch`: a run held to its frozen forecast (issue 33).

Synthetic runs from tests/synthetic.py (the truth written without ablate): a healthy sigmoid,
the same run with a sharp collapse from a known evaluation on, too few evaluations, a falling
curve. What is asserted: the collapse is flagged at or after its onset and soon (the benchmark,
benchmarks/bench_watch.py, measures how soon over many runs); the healthy run is not flagged; the
band the trackers read from forecast.json (trainer.rundir, no ablate import) is the band the
verdicts used; bad input is one line, exit 2, nothing written; the installed console script
prints one line per run within 100 columns.
"""

from __future__ import annotations

import json
import os
import shutil
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _study_util import ROOT, cli

import synthetic as sy
from ablate.analysis import watch
from trainer import rundir

ONSET = 45


def _runs():
    """(healthy, collapsing) runs: 60 evaluations; the second loses 0.2 over 2 evaluations from
    evaluation ONSET on and stays there."""
    rng = np.random.default_rng(1)
    tr = sy.Truth(0.65, 1.6, 0.12, 0.1)
    c, good = sy.curve(tr, rng, n_points=60, prompts=500, samples=4)
    c, base = sy.curve(tr, np.random.default_rng(2), n_points=60, prompts=500, samples=4)
    bad = base.copy()
    bad[ONSET:] -= 0.2 * np.minimum(np.arange(1, bad.size - ONSET + 1) / 2, 1.0)
    return c, good, np.clip(bad, 0, 1)


def _csv(path: Path, **runs) -> Path:
    c = _runs()[0]
    rows = [{"variant": v, "compute": a, "score": b} for v, ys in runs.items()
            for a, b in zip(c[:len(ys)], ys)]
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_collapse_is_flagged_after_its_onset_and_the_healthy_run_is_not():
    c, good, bad = _runs()
    jg = watch.judge("g", "g", 0, c, good)
    jb = watch.judge("b", "b", 0, c, bad)
    assert jg.verdict in ("on track", "ahead") and jg.departed_at is None
    assert jb.verdict == "departed"
    assert jb.forecast.n_points <= ONSET  # frozen before the collapse, from its own data
    assert c[ONSET] <= jb.departed_at and jb.flagged_eval - ONSET <= 4
    assert jb.at_budget is None  # no sigmoid through a collapse
    assert jg.at_budget["lo"] <= jg.at_budget["score"] <= jg.at_budget["hi"]
    # the freeze reads only the evaluations up to it: judging the run at any later length
    # keeps the same forecast (what --follow sees evaluation by evaluation)
    part = watch.judge("b", "b", 0, c[:ONSET + 1], bad[:ONSET + 1])
    assert part.forecast.frozen_at == jb.forecast.frozen_at
    assert part.verdict in ("on track", "ahead", "behind")


def test_k_and_level_trade_delay_for_false_alarms():
    c, _, bad = _runs()
    n, fit, _ = watch.freeze_index(c, bad)
    bands = {lv: watch.make_forecast(fit, n, "identified", lv, 2.0) for lv in (0.95, 0.999)}
    flagged = [watch.judge_points(c, bad, bands[0.95], n, k)[1] + k - 1 for k in (1, 2, 3)]
    # k = 1 at 95% takes one low evaluation for a departure (here a false alarm before the
    # onset); k = 2 and 3 wait for the collapse, each one evaluation longer
    assert flagged[0] <= flagged[1] < flagged[2] and flagged[1] >= ONSET
    lo95, _, hi95 = bands[0.95].band(0.9)
    lo999, _, hi999 = bands[0.999].band(0.9)
    assert lo999 < lo95 < hi95 < hi999


def test_before_a_forecast_it_says_how_many_more_evaluations_it_needs():
    c, good, _ = _runs()
    j = watch.judge("g", "g", 0, c[:6], good[:6])
    assert j.verdict == "waiting" and j.forecast is None and j.needs == 4
    fall = watch.judge("f", "f", 0, c[:20], 0.6 - 0.01 * np.arange(20))
    assert fall.verdict == "waiting" and fall.needs is None and "falling" in fall.reason


def test_forecast_file_band_is_the_band_the_verdicts_used(tmp_path):
    c, good, _ = _runs()
    j = watch.judge("g", "g", 0, c, good)
    rundir.write_forecast(tmp_path, {"x": "gpu_hours", "y": "eval/pass_rate",
                                     "forecast": j.forecast.as_dict()})
    doc = rundir.read_forecast(tmp_path)
    for p in j.points[::7]:
        lo, mid, hi = rundir.forecast_band(doc, p.compute)
        assert (lo, mid, hi) == pytest.approx((p.lo, p.mid, p.hi), abs=1e-9)
    assert rundir.forecast_band(doc, j.forecast.grid[-1] * 1.01) is None
    from trainer.trackers import band_series

    got = band_series(tmp_path, {"gpu_hours": j.points[3].compute, "eval/pass_rate": 0.5})
    assert got["eval/pass_rate_forecast_lo"] == pytest.approx(j.points[3].lo)
    assert got["eval/pass_rate_forecast_hi"] == pytest.approx(j.points[3].hi)
    assert band_series(tmp_path, {"gpu_hours": 0.5, "train/loss": 1.0}) == {}  # no score: none


def _run_dir(tmp_path: Path, scores, state: str = "running") -> Path:
    d = tmp_path / "run0"
    d.mkdir()
    c = _runs()[0]
    for i, s in enumerate(scores):
        rundir.append_metrics(d, {"step": i * 10, "gpu_hours": float(c[i]),
                                  "eval/pass_rate": float(s)})
        rundir.append_metrics(d, {"step": i * 10 + 5, "gpu_hours": float(c[i]) + 0.001,
                                  "train/loss": 0.1})  # a training row: no score
    rundir.write_status(d, state, len(scores) * 10)
    return d


def test_run_dir_gets_forecast_json_and_on_depart_runs(tmp_path):
    _, _, bad = _runs()
    d = _run_dir(tmp_path, bad, state="done")
    log = tmp_path / "departed.txt"
    r = cli("watch", str(d), "--follow", "--interval", "0.1",
            "--on-depart", f"echo >> {log}")  # --follow ends: the run dir is done
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == ["run0", "departed"] and len(r.stdout.splitlines()) == 1
    assert log.read_text().split() == ["run0", "departed"]
    doc = rundir.read_forecast(d)
    assert doc["verdict"] == "departed" and doc["x"] == "gpu_hours"
    assert cli("watch", str(d), "--on-depart", f"echo >> {log}").returncode == 0
    assert log.read_text().split() == ["run0", "departed"]  # told once, not at every look


def test_bad_input_is_one_line_exit_2_nothing_written(tmp_path):
    c, good, _ = _runs()
    cases = {
        "short": _csv(tmp_path / "short.csv", a=good[:7]),
        "no score": tmp_path / "noscore.csv",
        "empty run dir": tmp_path / "emptyrun",
        "falling": _csv(tmp_path / "fall.csv", a=list(0.6 - 0.01 * np.arange(20))),
    }
    pd.DataFrame({"compute": c, "loss": good}).to_csv(cases["no score"], index=False)
    (tmp_path / "emptyrun").mkdir()
    rundir.write_status(tmp_path / "emptyrun", "running", 0)
    want = {"short": "needs at least 3 more", "no score": "score", "empty run dir": "no metrics",
            "falling": "flat or falling"}
    for name, path in cases.items():
        png = tmp_path / f"{name.replace(' ', '_')}.png"
        r = cli("watch", str(path), "--plot", str(png))
        assert r.returncode == 2, (name, r.stdout, r.stderr)
        assert r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, (name, r.stderr)
        assert want[name] in r.stderr and "Traceback" not in r.stderr
        assert not png.exists()
    assert not (tmp_path / "emptyrun" / rundir.FORECAST).exists()


def test_console_script_one_line_per_run_at_100_columns(tmp_path):
    exe = shutil.which("ablate")
    if exe is None:
        pytest.skip("the `ablate` console script is not on PATH (pip install -e .)")
    _, good, bad = _runs()
    src = _csv(tmp_path / "runs.csv", healthy=good, collapsing=bad, short=good[:5])
    env = {**os.environ, "COLUMNS": "100", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([exe, "watch", "runs.csv", "--plot", "w.png"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and all(len(s) <= 100 for s in lines)
    # "run  verdict  latest [band] @C; @budget: forecast [band]; flat by C", nothing cut (~)
    verdicts = {m[1]: m[2] for m in (re.match(r"(\S+) +(on track|ahead|behind|departed|waiting)"
                                               r"( |$)", s) for s in lines)}
    assert not any(s.endswith("~") for s in lines), lines
    healthy = next(s for s in lines if s.startswith("healthy "))
    assert re.search(r"; @[\d.e]+: [\d.]+ \[[\d.]+, [\d.]+\]; flat by [\d.e]+$", healthy), healthy
    assert verdicts["collapsing"] == "departed" and verdicts["short"] == "waiting"
    assert verdicts["healthy"] in ("on track", "ahead")
    assert (tmp_path / "w.png").stat().st_size > 10_000
    js = json.loads(subprocess.run([exe, "watch", str(src), "--json"], env=env,
                                   capture_output=True, text=True, timeout=300).stdout)
    assert [o["verdict"] for o in js] == ["on track" if verdicts["healthy"] == "on track"
                                          else "ahead", "departed", "waiting"]
    assert js[1]["departed_at"] >= _runs()[0][ONSET] and js[2]["needs"] == 5


def test_study_runs_get_verdicts_in_status(tmp_path):
    c, good, bad = _runs()
    st = tmp_path / "st"
    st.mkdir()
    (st / "variants.json").write_text(json.dumps(
        [{"run_id": r, "name": n, "seed": 0} for r, n in (("r0", "a"), ("r1", "b"), ("r2", "c"))]))
    for rid, ys in (("r0", good), ("r1", bad), ("r2", good[:5])):
        for i, s in enumerate(ys):
            (st / rid).mkdir(exist_ok=True)
            rundir.append_metrics(st / rid, {"step": i, "gpu_hours": float(c[i]),
                                             "eval/pass_rate": float(s)})
        rundir.write_status(st / rid, "running", len(ys))
    r = cli("watch", str(st))
    assert r.returncode == 0, r.stderr
    assert [s.split()[0] for s in r.stdout.splitlines()] == ["r0", "r1", "r2"]
    assert not (st / "r2" / rundir.FORECAST).exists()  # no forecast: nothing written
    r = cli("status", str(st), "--json")
    assert r.returncode == 0, r.stderr
    got = {o["run_id"]: o["watch"] for o in json.loads(r.stdout)}
    assert got["r1"] == "departed" and got["r0"] in ("on track", "ahead") and got["r2"] is None


def _log_with_band(tmp_path: Path, backends: list[str]):
    """A run logging every 6th evaluation of the healthy run to `backends`; `ablate watch`'s
    forecast.json appears before the row at evaluation 18. Returns (judgement, run dir, c)."""
    from trainer import trackers
    from trainer.config import TrainConfig

    c, good, _ = _runs()
    j = watch.judge("g", "g", 0, c, good, with_today=False)
    run = tmp_path / "st" / "r0"
    run.mkdir(parents=True)
    rundir.write_identity(run, study="st", variant="g", seed=0)
    cfg = TrainConfig.model_validate({"logging": {"backends": backends}})
    for i in range(0, c.size, 6):  # the forecast appears mid-run: earlier rows get no band
        if i == 18:
            rundir.write_forecast(run, {"x": "gpu_hours", "y": "eval/pass_rate",
                                        "forecast": j.forecast.as_dict()})
        trackers.log_metrics(cfg, run, {"step": i, "gpu_hours": float(c[i]),
                                        "eval/pass_rate": float(good[i])})
    trackers.close()
    return j, run, c


def test_tensorboard_gets_the_band_beside_the_score_and_fit_still_reads_the_score(tmp_path):
    pytest.importorskip("tbparse")
    from tbparse import SummaryReader

    from ablate.analysis.sources import load

    j, run, c = _log_with_band(tmp_path, ["tensorboard"])
    sc = SummaryReader(str(tmp_path / "st" / "tensorboard")).scalars
    lo = sc[sc["tag"] == "eval/pass_rate_forecast_lo"].sort_values("step")
    steps = [i for i in range(18, c.size, 6) if c[i] >= j.forecast.frozen_at]
    assert lo["step"].tolist() == steps
    want = rundir.forecast_band(rundir.read_forecast(run), float(c[steps[0]]))[0]
    assert lo["value"].iloc[0] == pytest.approx(want, abs=1e-6)
    assert load(tmp_path / "st" / "tensorboard").y == "eval/pass_rate"  # not ambiguous


def test_adaptive_stage_stops_a_departed_variant_only_when_the_study_asks():
    from ablate.analysis.variant_fits import GroupFit
    from ablate.studies.stage_rules import decide, departed_variants
    from ablate.studies.stagespec import StageSpec

    c, good, bad = _runs()
    frame = pd.DataFrame([{"variant": v, "seed": 0, "compute": a, "score": b}
                          for v, ys in (("good", good), ("bad", bad)) for a, b in zip(c, ys)])
    gone = departed_variants(frame)
    assert list(gone) == ["bad"] and "departed" in gone["bad"]
    groups = [GroupFit(v, None, "not fit here", 0) for v in ("good", "bad")]
    assert decide(groups, departed=gone).kept == ["good"]
    assert decide(groups).kept == ["good", "bad"]  # without the opt-in nothing stops
    spec = {"budgets": [{"steps": 10}]}
    assert StageSpec.model_validate(spec).stop_departed is False
    assert StageSpec.model_validate({**spec, "stop_departed": True}).stop_departed is True


def _readline(stream, timeout: float = 120) -> str:
    """The stream's next line; fails (instead of hanging the suite) if none comes in time."""
    import threading

    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    assert got, f"no line from `ablate watch --follow` in {timeout} s"
    return got[0]


def test_long_run_names_are_cut_so_the_whole_verdict_fits(tmp_path):
    """A long name gives up columns (down to 12) before the forecast or "flat by" would."""
    _, good, _ = _runs()
    long = "loss.aggregation=sample_seed_0"
    src = _csv(tmp_path / "runs.csv", **{long: good, "b": good})
    r = subprocess.run([sys.executable, "-m", "ablate", "watch", str(src)], capture_output=True,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100"), text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 2 and all(len(s) <= 100 for s in lines), lines
    assert all("flat by" in s and not s.endswith("~") for s in lines), lines
    name = lines[0].split()[0]
    assert name.endswith("~") and long.startswith(name[:-1]) and len(name) >= 12, lines


def test_follow_is_quiet_until_the_verdict_changes(tmp_path):
    import time

    _, _, bad = _runs()
    src = _csv(tmp_path / "log.csv", run=bad[:ONSET - 10])
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "ablate", "watch", str(src), "--follow",
                          "--interval", "0.3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=env)
    try:
        first = _readline(p.stdout)  # the first read: the run on its forecast
        assert first.split()[:3] == ["run", "on", "track"], first
        _csv(tmp_path / "log.csv", run=bad[:ONSET - 5])  # grows, still on track: nothing
        time.sleep(3)
        (tmp_path / "log.csv").write_text("")  # a logger caught mid-rewrite: waited for, not
        waiting = _readline(p.stderr)  # an error that ends the watch (it failed CI once so)
        assert waiting.startswith("waiting: ") and p.poll() is None, waiting
        _csv(tmp_path / "log.csv", run=bad)  # the collapse arrives
        second = _readline(p.stdout)
        assert second.split()[:2] == ["run", "departed"], second
    finally:
        p.kill()
        p.wait()


def test_tune_rung_stops_a_departed_trial_only_when_asked(tmp_path):
    import optuna

    from ablate.studies.tune import Objective, Prune, _judge_rung

    _, _, bad = _runs()
    d = _run_dir(tmp_path, bad)
    study = optuna.create_study(direction="maximize")
    asked = Prune.model_validate({"rungs": [{"steps": 10}], "stop_departed": True})
    with pytest.raises(optuna.TrialPruned, match="below the 99% band"):
        _judge_rung(study.ask(), 0, {"steps": 600}, d, Objective(), asked.stop_departed)
    _judge_rung(study.ask(), 0, {"steps": 600}, d, Objective())  # not asked: no finished
    # trial to compare with, so nothing stops it


def test_mlflow_gets_the_band_series(tmp_path):
    pytest.importorskip("mlflow")
    import glob

    j, run, c = _log_with_band(tmp_path, ["mlflow"])
    (hi,) = glob.glob(str(tmp_path / "st" / "mlruns" / "*" / "*" / "metrics" / "eval" /
                          "pass_rate_forecast_hi"))
    got = [(int(s), float(v)) for _, v, s in (ln.split() for ln in open(hi).read().splitlines())]
    steps = [i for i in range(18, c.size, 6) if c[i] >= j.forecast.frozen_at]
    assert [s for s, _ in got] == steps
    doc = rundir.read_forecast(run)
    assert got[0][1] == pytest.approx(rundir.forecast_band(doc, float(c[steps[0]]))[2], abs=1e-6)
