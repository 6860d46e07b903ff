"""`ablate report`: one self-contained HTML page, checked by rendering it in headless Chromium
(Debian's chromium driven by Playwright): a screenshot is taken, every image decodes and the
console shows no error."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _beside import CHROMIUM as CHROMIUM_READY
from _beside import wait_ready
from synthetic import Truth, curve

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync"]
STUDY_YAML = """\
name: loss_agg
description: Does prompt-level loss aggregation beat token-level at our scale?
base: scalerl.yaml
axes:
  loss.aggregation: [prompt, token, sample]
seeds: [0, 1]
budget: {steps: 100}
fit: {x: gpu_hours, y: eval/pass_rate, min_compute: 0}
"""


def make_study(root: Path) -> Path:
    """A finished-looking study: two variants x two seeds done, one run failed, one diverged."""
    d = root / "loss_agg"
    d.mkdir(parents=True)
    (d / "study.yaml").write_text(STUDY_YAML)
    rng = np.random.default_rng(3)
    truths = {"loss.aggregation=prompt": Truth(0.62, 1.6, 0.2, 0.1),
              "loss.aggregation=token": Truth(0.55, 1.2, 0.25, 0.1)}
    variants = []
    for name, truth in truths.items():
        for seed in (0, 1):
            rid = f"{len(variants):012x}"
            variants.append({"run_id": rid, "name": name, "seed": seed, "config": {}})
            c, s = curve(truth, rng, n_points=40)
            (d / rid).mkdir()
            (d / rid / "metrics.jsonl").write_text("".join(
                json.dumps({"step": 10 * i, "gpu_hours": float(ci), "eval/pass_rate": float(si)})
                + "\n" for i, (ci, si) in enumerate(zip(c, s))))
            (d / rid / "status.json").write_text(json.dumps({"state": "done", "step": 400}))
    for i, (state, extra) in enumerate([
            ("failed", {"error": "RuntimeError: CUDA out of memory <b>not html</b>"}),
            ("diverged", {"reason": "non-finite loss or grad"})]):
        rid = f"f{i:011x}"
        variants.append({"run_id": rid, "name": "loss.aggregation=sample", "seed": i, "config": {}})
        (d / rid).mkdir()
        (d / rid / "metrics.jsonl").write_text(json.dumps(
            {"step": 0, "gpu_hours": 0.0, "eval/pass_rate": 0.1}) + "\n")
        (d / rid / "status.json").write_text(json.dumps({"state": state, "step": 37, **extra}))
    (d / "variants.json").write_text(json.dumps(variants))
    return d


@pytest.mark.slow  # fits and draws every variant's plot (matplotlib's first import among
# them): 2.3 s of CPU in a fresh-clone CI, over the fast tier's 2-s limit (issue 52 point 7)
def test_report_page_content(tmp_path):
    from ablate.analysis.report import write_report

    d = make_study(tmp_path)
    path, data = write_report(d, n_boot=200)
    assert path == d / "report.html"
    page = path.read_text()
    assert "Does prompt-level loss aggregation beat token-level at our scale?" in page
    assert [r["variant"] for r in data.ranking[:2]] == ["loss.aggregation=prompt",
                                                       "loss.aggregation=token"]
    assert data.ranking[0]["rank"] == 1 and data.ranking[0]["A_ci"][0] < 0.62 < \
        data.ranking[0]["A_ci"][1] + 0.02
    # every fit variant has its own figure, plus the overview: all embedded, none fetched
    assert len(re.findall(r'src="data:image/png;base64,', page)) == 1 + 2
    assert "<script" not in page and not re.search(r'(src|href)="https?:', page)
    assert {p["state"] for p in data.problems} == {"failed", "diverged"}
    assert "CUDA out of memory &lt;b&gt;not html&lt;/b&gt;" in page  # escaped
    assert str(d / "f00000000000" / "status.json") in page  # where to look
    assert "non-finite loss or grad" in page  # why the diverged run stopped
    assert "name: loss_agg" in page  # the study as submitted
    # the answer on top, naming the baseline and the window the table was fitted on
    assert page.index('class="answer"') < page.index("<h2>Question</h2>")
    # variants named as the table names them: the axis once, then the values that differ
    assert data.answer.startswith("loss.aggregation: prompt has the higher ceiling: A 0.6")
    assert "(baseline prompt; window 0–1 gpu_hours)" in data.answer
    assert "<b>Variants</b>: loss.aggregation: prompt | token | sample" in page
    assert '<span title="loss.aggregation=token">token</span>' in page
    assert html.escape(data.answer) in page and "<b>Fit window</b>" in page
    # one colour per variant, the same in the table and in every figure
    assert len(set(data.colors.values())) == 2 + 1
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in data.colors.values())
    assert page.count(f"background: {data.colors['loss.aggregation=token']}") == 2


@pytest.mark.slow
def test_report_reproduce_block_pastes(tmp_path):
    """Each command of the reproduce block runs as pasted (absolute paths, real options)."""
    from ablate.analysis.report import write_report

    d = make_study(tmp_path)
    _, data = write_report(d, n_boot=200, baseline="loss.aggregation=token", margin=0.03)
    compare = next(c for c in data.commands if c.startswith("ablate compare"))
    assert compare.startswith(f"ablate compare {d.resolve()} --baseline "
                              "loss.aggregation=token --margin 0.03")
    r = subprocess.run(compare.split("#")[0] + " --json", shell=True, capture_output=True, text=True,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert r.returncode == 0, r.stderr
    assert [x["A"] for x in json.loads(r.stdout)["rows"]] == [x["A"] for x in data.ranking]


def _chromium() -> str:
    why = wait_ready(CHROMIUM_READY)  # tests/run.sh installs it beside the tests
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        import playwright  # noqa: F401
    except ImportError:
        exe = None
    if exe is None:
        msg = why or "needs Debian's chromium and playwright (tests/run.sh installs both)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return exe


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path):
    exe = _chromium()
    from playwright.sync_api import sync_playwright

    from ablate.analysis.report import write_report

    path, _ = write_report(make_study(tmp_path), n_boot=200)
    errors: list[str] = []
    with sync_playwright() as p:
        # a new empty profile dir (Playwright passes it as --user-data-dir)
        browser = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=exe, headless=True, args=CHROMIUM_FLAGS,
            viewport={"width": 1200, "height": 900})
        page = browser.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        images = page.eval_on_selector_all(
            "img", "els => els.map(e => [e.complete, e.naturalWidth, e.naturalHeight])")
        shot = tmp_path / "report.png"
        page.screenshot(path=str(shot), full_page=True)
        title = page.title()
        browser.close()
    assert errors == []
    assert len(images) == 3 and all(ok and w > 300 and h > 200 for ok, w, h in images)
    assert title == "ablate report: loss_agg"
    assert shot.stat().st_size > 50_000  # a real page with plots, not a blank one
    out = os.environ.get("ABLATE_REPORT_SCREENSHOT")
    if out:  # to look at it: ABLATE_REPORT_SCREENSHOT=/tmp/report.png pytest ...
        shutil.copy(shot, out)


@pytest.mark.slow
def test_cli_report(tmp_path):
    from _cli import ablate

    d = make_study(tmp_path)
    out = tmp_path / "share.html"
    r = ablate("report", d, "--out", out, "--json", cwd=tmp_path)
    assert r.returncode == 0, r
    obj = json.loads(r.stdout)
    assert obj["report"] == str(out) and out.is_file() and obj["name"] == "loss_agg"
    assert len(obj["runs"]) == 6 and "figures" not in obj
    r = ablate("report", tmp_path / "nope", cwd=tmp_path)
    assert r.returncode == 2 and "not a study results dir" in r.stderr, r
    assert "Traceback" not in r.stderr
    r = ablate("report", d, "--out", tmp_path / "r.pdf", cwd=tmp_path)
    assert r.returncode == 2 and "is an .html file" in r.stderr, r
    assert not (tmp_path / "r.pdf").exists()


@pytest.mark.slow  # a report and a compare, each fitting 3 variants: 3.4-3.6 s of CPU (on main
# too, 43ed0e9), over the fast tier's 2-s limit
def test_report_says_what_compare_says(tmp_path):
    """The page's ranking is compare's, cell for cell (A, B, the predicted column), under the
    same words about the band: one set of functions makes both (ablate/analysis/ranking_text)."""
    from _cli import ablate
    from ablate.analysis.ranking_text import PREDICTIVE

    d = make_study(tmp_path)
    out = tmp_path / "page.html"
    r = ablate("report", d, "--out", out, cwd=tmp_path, columns=80)
    assert r.returncode == 0, r
    page = html.unescape(out.read_text())
    c = ablate("compare", d, cwd=tmp_path, columns=200)
    assert c.returncode == 0, c
    rows = [line.split() for line in c.stdout.splitlines() if re.match(r"\s+\d+\s", line)]
    assert len(rows) == 2, c
    # the page's number cells as text (an estimate and its interval are two spans there, so
    # that a narrow window can put them on two lines)
    shown = {re.sub(r"<[^>]+>", "", m) for m in re.findall(r'<td class="num">(.*?)</td>', page)}
    for row in rows:  # "1 prompt 0.619 [0.601, 0.638] 1.6 [1.3, 1.9] 0.61 [...] ok —"
        cells = re.findall(r"[-\d.e+]+ \[[^\]]+\]", " ".join(row))
        assert len(cells) == 3, row
        for cell in cells:
            assert cell in shown, (cell, sorted(shown))
    said = " ".join(c.stdout.split())
    assert "(max) [95% predictive]" in page and PREDICTIVE in page and PREDICTIVE in said, said
    assert "may reach above" not in page


@pytest.mark.parametrize("flag", ["--y", "--x"])
def test_report_on_a_missing_column_exits_2_and_writes_nothing(tmp_path, flag):
    """A column that does not exist is bad input for the report as for compare: exit 2, one
    line naming the column and the ones there are; no page, no metrics cache."""
    from _cli import ablate

    d = make_study(tmp_path)
    for cmd in ("report", "compare"):
        r = ablate(cmd, d, flag, "eval/nonexistent", cwd=tmp_path, columns=80)
        assert r.returncode == 2, r
        assert "no column 'eval/nonexistent'" in r.stderr and "Traceback" not in r.stderr, r
        assert len(r.stderr.strip().splitlines()) == 1, r
    assert not (d / "report.html").exists() and not (d / "metrics.parquet").exists()


def test_report_of_a_study_with_no_evaluations_yet(tmp_path):
    """Not bad input: the page shows the runs and says there is nothing to fit yet (exit 0);
    compare, which has nothing else to show, says so in one line (exit 2)."""
    from _cli import ablate

    d = tmp_path / "st"
    (d / "r1").mkdir(parents=True)
    (d / "variants.json").write_text(json.dumps([{"run_id": "r1", "name": "a", "seed": 0,
                                                  "config": {}}]))
    (d / "r1" / "status.json").write_text(json.dumps({"state": "running", "step": 3}))
    r = ablate("report", d, cwd=tmp_path, columns=80)
    assert r.returncode == 0 and (d / "report.html").is_file(), r
    assert "no run has logged an evaluation yet" in (d / "report.html").read_text()
    r = ablate("compare", d, cwd=tmp_path, columns=80)
    assert r.returncode == 2 and "no run has logged an evaluation yet" in r.stderr, r
