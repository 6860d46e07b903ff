"""A run that peaked and fell, named in every answer (issue 51 points 2 and 3): one rule
(ablate/analysis/sag.py) that watch, compare, extrapolate, status and the report apply.

Synthetic runs (tests/_sag_curves.py, tests/synthetic.py): a "hot" variant that rises and stays,
a "cold" one that rises to ~0.80 and falls ~0.11 over its last quarter (the quickstart's 0.3
variant's shape), from their start or from 15% of their compute (a late start). The fast tests
check the rule on numbers; the slow ones fit (watch's freeze scan, compare's intervals)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _cli import ablate
from _curves_util import write_study
from _sag_curves import sag_frame

from ablate.analysis import sag


def test_the_sag_rule_names_a_fall_not_noise_nor_a_curve_falling_from_its_start():
    c = np.linspace(0, 1, 40)
    rise = 0.1 + 0.72 * (1 - np.exp(-c * 10))
    fell = rise.copy()
    fell[-8:] -= 0.12
    got = sag.fall_from_peak(c, fell)
    assert got is not None and got.peak - got.latest >= sag.FALL, got
    assert sag.fall_from_peak(c, rise) is None
    # a healthy plateau on a noisy eval set (sd 0.05): its best mean of 3 sits ~0.07 above its
    # last by chance; the noise guard keeps it from reading as a fall (1,000 runs, fixed seed)
    rng = np.random.default_rng(0)
    false = sum(sag.fall_from_peak(c, rise + rng.normal(0, 0.05, c.size)) is not None
                for _ in range(1000))
    assert false <= 5, false
    # a score that only falls from its first evaluation has no peak to fall from
    assert sag.fall_from_peak(c[:20], 0.6 - 0.01 * np.arange(20)) is None
    # order of rows does not matter (a log's rows out of order)
    perm = rng.permutation(c.size)
    assert sag.fall_from_peak(c[perm], fell[perm]) == got
    assert sag.reached(c, fell, 0.8) is not None and sag.reached(c, rise, 0.9) is None


@pytest.mark.slow  # watch's freeze scan and compare's fits: seconds of CPU
@pytest.mark.parametrize("late", [False, True], ids=["from-start", "late-start"])
def test_watch_and_compare_agree_on_which_runs_sag(tmp_path, late):
    from ablate.analysis import watch
    from ablate.analysis.pipeline import Options, analyze

    frame = sag_frame(late=late)
    d = write_study(tmp_path, frame)
    a = analyze(d, Options(n_boot=200))
    named = {(g.variant, s) for g in a.groups for s, _ in g.falls}
    judged = {}
    for (v, s), g in frame.groupby(["variant", "seed"], sort=False):
        j = watch.judge(f"{v}{s}", v, s, g["compute"], g["score"])
        judged[(v, s)] = j
    fell = {key for key, j in judged.items() if j.fall is not None}
    assert named == fell == {("cold", 0), ("cold", 1)}, (named, fell)
    assert all(judged[k].verdict in ("behind", "departed") for k in fell), \
        {k: (j.verdict, j.reason) for k, j in judged.items()}
    cold = next(g for g in a.groups if g.variant == "cold")
    verdict, why = cold.verdict()
    assert verdict == "fell from its peak" or "fell 0.1" in why, (verdict, why)
    from ablate.analysis.answer import answer_sentence

    assert "cold peaked and fell (seed 0: 0.8" in answer_sentence(a), answer_sentence(a)
    hot = next(g for g in a.groups if g.variant == "hot")
    assert hot.falls == [] and hot.verdict()[0] == "ok"


@pytest.mark.slow  # compare's fits
def test_extrapolate_a_target_the_data_reached_is_never_not_reachable(tmp_path):
    d = write_study(tmp_path, sag_frame())
    r = ablate("extrapolate", d, "--target", "0.8", "--json", columns=None)
    assert r.returncode == 0, r.stderr
    rows = {x["variant"]: x for x in json.loads(r.stdout)["rows"]}
    cold = rows["cold"]
    assert cold["reached"] and cold["compute"] == cold["reached"]["compute"], cold
    assert "not reachable" not in cold["note"].split("the fit alone")[0], cold["note"]
    assert "reached (observed)" in cold["note"] and "fell from its peak" in cold["note"]
    assert cold["fell"] and {f["seed"] for f in cold["fell"]} == {0, 1}
    # a target above what any run reached is still the fit's answer
    r = ablate("extrapolate", d, "--target", "0.95", "--json", columns=None)
    rows = {x["variant"]: x for x in json.loads(r.stdout)["rows"]}
    assert rows["cold"]["reached"] is None and "not reachable" in rows["cold"]["note"]


@pytest.mark.slow  # a forecast's band (1,000 draws) and its renewal's fit
def test_a_provisional_forecast_is_renewed_as_the_run_outgrows_it():
    """Issue 51 point 2: a run held all its life to the band of its first evaluations read
    "ahead 0.700 [0.607, 0.681]". Held to such a band (fit on the first 12 evaluations of a
    curve 0.8 times this one), the evaluations past twice its compute are held to a refit."""
    from ablate.analysis import watch

    c = np.linspace(0.0, 1.0, 41)
    y = 0.1 + 0.73 * (1 - np.exp(-c * 12)) + 0.004 * np.sin(np.arange(41))
    early = watch.make_forecast(watch.fit_quiet(c[:12], 0.8 * y[:12], intervals=True), 12,
                                "provisional", 0.99, 2.0)
    assert watch.walk(c, y, [early], 12, 3).points[-1].side == "above"  # never renewed: ahead
    j = watch.judge("q", "q", 0, c, y, frozen=[early.as_dict()], with_today=False)
    assert len(j.forecasts) >= 2 and all(f.rule == "provisional" for f in j.forecasts)
    assert j.forecasts[-1].frozen_at >= watch.OUTGROWN * early.frozen_at * 0.95
    assert j.verdict == "on track", (j.verdict, j.reason, j.points[-1])
    assert "refit at compute" in j.reason and "outgrew" in j.reason, j.reason
    # the same run falling to 0.70 over its last 6 evaluations: not ahead of anything
    y2 = y.copy()
    y2[-6:] = 0.70
    j2 = watch.judge("q", "q", 0, c, y2, frozen=[early.as_dict()], with_today=False)
    assert j2.verdict in ("departed", "behind") and j2.fall is not None, j2.reason


@pytest.mark.slow  # `ablate watch` of a study (four freeze scans) and a report
def test_status_and_report_show_the_fall_and_a_folder_one_level_off_is_its_study(tmp_path):
    d = write_study(tmp_path / "results", sag_frame())
    r = ablate("status", d, "--json", columns=None)
    assert r.returncode == 0, r.stderr
    got = {(x["name"], x["seed"]): x for x in json.loads(r.stdout)}
    assert got[("hot", 0)]["watch"] is None and got[("hot", 0)]["fell"] is None, got
    assert got[("cold", 0)]["watch"] is None and got[("cold", 0)]["fell"]["peak"] > 0.78, got
    table = ablate("status", d, columns=100).stdout
    assert [line.split()[-1] for line in table.splitlines() if " cold " in line] \
        == ["0.80→0.70", "0.80→0.69"], table
    # watch and report of the results folder (one level too high) are the study's
    r = ablate("watch", tmp_path / "results", "--json", columns=None)
    assert r.returncode == 0, r.stderr
    assert sorted(p.parent.name for p in d.glob("*/watch.json")) == \
        ["run0000", "run0001", "run0002", "run0003"]
    r = ablate("status", d, "--json", columns=None)
    got = {(x["name"], x["seed"]): x for x in json.loads(r.stdout)}
    assert got[("cold", 1)]["watch"] in ("departed", "behind") and got[("cold", 1)]["fell"], got
    assert got[("hot", 1)]["watch"] in ("on track", "ahead") and not got[("hot", 1)]["fell"]
    r = ablate("report", tmp_path / "results", "--json", columns=None)
    assert r.returncode == 0, r.stderr
    page = json.loads(r.stdout)
    assert page["report"] == str(d / "report.html")
    assert [(x["watch"], x["fell"]) for x in page["runs"]] == \
        [(got[(x["name"], x["seed"])]["watch"], got[(x["name"], x["seed"])]["fell"])
         for x in page["runs"]]
