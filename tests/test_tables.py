"""The first screen reads at any width: every table (fit, compare, extrapolate, plan, status and
the `sweep --wait` view) rendered from real fits of synthetic curves with long variant labels
at 80, 100 and 160 columns shows each label whole (shortened to what differs, the axes named
once in a legend), no line wider than the terminal and no row taller than two lines."""

from __future__ import annotations

import io
import json
import re
import subprocess
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

import synthetic as sy
from _cli import ablate_script
from _curves_util import curves_frame, write_study
from ablate.analysis.labels import shorten

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (80, 100, 160)

# One axis: the labels differ only in the value, which is all the table should show.
ONE_AXIS = {"off_policy.mode=pipeline": sy.Truth(0.60, 1.2, 0.012, 0.1),
            "off_policy.mode=ppo_off_policy": sy.Truth(0.64, 1.6, 0.010, 0.1)}
# A 2x2 grid: both axes vary, so both values stay, the axis names go to the legend.
GRID = {f"off_policy.mode={m},loss.aggregation={a}": sy.Truth(A, 1.4, 0.011, 0.1)
        for (m, a), A in zip([("pipeline", "token_mean"), ("pipeline", "sequence_mean_norm"),
                              ("ppo_off_policy", "token_mean"),
                              ("ppo_off_policy", "sequence_mean_norm")], (0.58, 0.61, 0.63, 0.66))}
# One at a time: `base` has no axis, so nothing can be shortened and the long labels stay whole.
MIXED = {"base": sy.Truth(0.60, 1.3, 0.011, 0.1),
         "off_policy.mode=ppo_off_policy,loss.aggregation=sequence_mean_norm":
             sy.Truth(0.66, 1.5, 0.010, 0.1)}
SETS = {"one_axis": ONE_AXIS, "grid": GRID, "mixed": MIXED}
SHORT = {"one_axis": ["pipeline", "ppo_off_policy"],
         "grid": ["pipeline, token_mean", "pipeline, sequence_mean_norm",
                  "ppo_off_policy, token_mean", "ppo_off_policy, sequence_mean_norm"],
         "mixed": list(MIXED)}
# The legend lists the values in the table's row order (a ranking puts the winner first).
LEGEND = {"one_axis": ("off_policy.mode: pipeline | ppo_off_policy",
                       "off_policy.mode: ppo_off_policy | pipeline"),
          "grid": ("variant = off_policy.mode, loss.aggregation\n",), "mixed": ()}


def test_shorten_names_the_axes_once_and_keeps_what_differs():
    assert shorten(list(ONE_AXIS)) == (
        "off_policy.mode: pipeline | ppo_off_policy",
        {"off_policy.mode=pipeline": "pipeline",
         "off_policy.mode=ppo_off_policy": "ppo_off_policy"})
    # a list value keeps its comma; an axis set alike everywhere is said once
    legend, short = shorten(["a.x=1,b=2,c=[1,2]", "a.x=1,b=3,c=[1,2]"])
    assert legend == "b: 2 | 3 (all a.x=1, c=[1,2])" and list(short.values()) == ["2", "3"]
    legend, short = shorten(list(GRID))
    assert legend == ("variant = off_policy.mode, loss.aggregation\noff_policy.mode: pipeline | "
                      "ppo_off_policy\nloss.aggregation: token_mean | sequence_mean_norm")
    assert list(short.values()) == SHORT["grid"]
    for labels in (list(MIXED), ["cispo", "ppo"], ["loss.type=ppo"],
                   ["loss.type=ppo", "optimizer.lr=0.001"]):  # nothing shared to name once
        assert shorten(labels) == ("", {lab: lab for lab in labels})


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """name -> (study dir, fitted groups), fitted once by the same functions the CLI calls."""
    from ablate.analysis.variant_fits import fit_groups
    from ablate.analysis.sources import load

    root = tmp_path_factory.mktemp("tables")
    out = {}
    for name, truths in SETS.items():
        d = write_study(root, curves_frame(seeds=1, n_points=40, truths=truths, seed=3), name)
        out[name] = d, fit_groups(load(d))
    return out


def _render(width: int, draw) -> str:
    con = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    draw(con)
    return con.export_text()


def _check(text: str, width: int, name: str) -> None:
    """Every shortened label whole on a line, the legend once, no line over the width but
    one that names a file (`look at: PATH`: whole, so it copies as one; the terminal folds it)."""
    lines = text.splitlines()
    assert max(cell_len(line) for line in lines if "look at: /" not in line) <= width, text
    for label in SHORT[name]:
        assert _whole(label, lines), f"{label!r} not whole:\n{text}"
    if LEGEND[name]:
        assert any(legend in text for legend in LEGEND[name]), text
    else:
        assert "variant = " not in text and ": base |" not in text, text
    assert "…" not in text, text  # nothing truncated
    # a number never leaves its interval: `0.879 [0.861,` / `0.899]` read as two numbers
    split = [line for line in lines if re.search(r"\[[-+\d.e∞]+,(?! [-+\d.e∞]+\])", line)]
    assert not split, f"an interval split over two lines: {split}\n{text}"


def _whole(label: str, lines: list[str]) -> bool:
    """The label on one line, or (a long multi-axis one) broken after one of its
    `axis=value,` (a shortened one after a value's `, `) on two consecutive lines, each
    part whole."""
    def on(part: str, line: str) -> bool:
        return re.search(rf"(^|\s){re.escape(part)}(\s|$)", line) is not None

    if any(on(label, line) for line in lines):
        return True
    cuts = [m.start() for m in re.finditer(r",(?=[a-z_.]+=| )", label)]
    return any(on(label[:c + 1], a) and on(label[c + 1:].lstrip(), b)
               for c in cuts for a, b in zip(lines, lines[1:]))


def _body_lines(text: str, caption: str) -> int:
    """Lines the table's rows take: from under the header rule to the caption."""
    lines = text.splitlines()
    rule = next(i for i, line in enumerate(lines) if line.startswith("─"))
    return next(i for i, line in enumerate(lines) if line.startswith(caption)) - rule - 1


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", list(SETS))
def test_compare_and_fit_tables(fitted, name, width):
    from ablate.analysis.compare import compare
    from ablate.cli.render import print_compare, print_fit

    d, groups = fitted[name]
    rows = compare(groups, budget=1.0)
    base = groups[0].variant
    text = _render(width, lambda con: print_compare(
        con, rows, groups, x="gpu_hours", y="eval/pass_rate", base=base, margin=0.02,
        budget=1.0, wide=False))
    _check(text, width, name)
    assert "A [95%]" in text and f"baseline: {SHORT[name][0]}" in text
    assert _body_lines(text, "baseline:") <= 2 * len(rows), text  # <= 2 lines a row
    # B, one of the two numbers a ranking is read by, at every width: with its interval or,
    # narrow, without (issue 52); never only named in the "not shown" line
    above_rule = text.split("─")[0]
    assert re.search(r"(^|\s)B( \[95%\])?(\s|$)", above_rule.split("\n", 1)[1]), text
    assert "not shown at" not in text or "B [95%]" not in text.split("not shown at")[1], text
    if width >= 100:  # the columns that decide
        for head in ("rank", "predicted at", "P(beats"):  # headers may wrap
            assert head in text, text
    if width == 160:  # --budget keeps the max column the README promises beside its own
        assert "(max)" in text and "predicted at 1 " in text, text
    else:  # a column that gives way is named, never silently gone
        assert "not shown at" not in text or "(see" in text, text
    assert "R0 [95%]" not in text and "C_mid" not in text  # --wide only
    wide = _render(width, lambda con: print_fit(con, groups, "gpu_hours", "eval/pass_rate",
                                                 wide=True))
    _check(wide, width, name)
    if width == 160:
        assert "R0 [95%]" in wide and "R²" in wide and "window" in wide, wide


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", list(SETS))
def test_extrapolate_and_plan_tables(fitted, name, width):
    from ablate.analysis.extrapolate import extrapolate
    from ablate.analysis.budget_plan import plan
    from ablate.cli.render import print_extrapolate, print_plan

    _, groups = fitted[name]
    rows = extrapolate(groups, budget=1.0, margin=0.02)
    text = _render(width, lambda con: print_extrapolate(con, rows, what="score at gpu_hours=1",
                                                        key="score", wide=False))
    _check(text, width, name)
    assert "★" in text
    result = plan(groups, 1.0)
    text = _render(width, lambda con: print_plan(con, result, title="plan: budget 1",
                                                 tol=0.005, wide=False))
    _check(text, width, name)
    assert "E[regret]" in text and "P(best)" in text, text  # headers are not markup
    assert _body_lines(text, "recommended:") <= 2 * len(result["rows"]), text


def _runs(tmp_path: Path, names: list[str]) -> Path:
    """A study dir in the run-dir layout (trainer/rundir.py, ablate/studydir.py) with one run per name: all done but the last,
    which is running at step 3 of 8."""
    d = tmp_path / "st"
    d.mkdir()
    variants = [{"run_id": f"{i:012x}", "name": n, "seed": 0,
                 "config": {"budget": {"steps": 8}}} for i, n in enumerate(names)]
    (d / "variants.json").write_text(json.dumps(variants))
    for i, v in enumerate(variants):
        (d / v["run_id"]).mkdir()
        st = {"state": "done", "step": 8} if i < len(variants) - 1 else \
            {"state": "failed", "step": 3, "error": "RuntimeError: [boom]"}
        (d / v["run_id"] / "status.json").write_text(json.dumps(st))
    return d


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", list(SETS))
def test_status_and_progress_tables(tmp_path, name, width):
    from ablate.cli.render import status_table
    from ablate.cli.live import watch
    from ablate.studies.status import study_states

    d = _runs(tmp_path, list(SETS[name]))
    states = study_states(d)
    text = _render(width, lambda con: con.print(status_table(con, str(d), states, wide=False)))
    _check(text, width, name)
    # ids whole, unless a 66-character label leaves no room for them (and the caption says so)
    assert "000000000000" in text or (width == 80 and name == "mixed"
                                       and "not shown at 80 columns: run_id" in text), text
    buf = io.StringIO()
    watch(d, poll_s=0.1, timeout_s=2, console=Console(file=buf, width=width, color_system=None))
    _check(buf.getvalue(), width, name)
    assert "8/8" in buf.getvalue() and "3/8" in buf.getvalue()
    assert "RuntimeError: [boom]" in buf.getvalue()  # the error as written, not read as markup


def _ablate(*args: str, columns: int) -> subprocess.CompletedProcess:
    """The real `ablate` executable of this interpreter, its stdout piped, at COLUMNS."""
    return ablate_script(*args, columns=columns, tests_on_path=False)


@pytest.mark.slow  # the console script, three times
def test_real_executable_compare_and_plan_at_100_columns(fitted):
    d, _ = fitted["one_axis"]
    r = _ablate("compare", str(d), "--budget", "1", columns=100)
    assert r.returncode == 0, r.stderr
    _check(r.stdout, 100, "one_axis")
    head = next(line for line in r.stdout.splitlines() if line.startswith("rank "))
    assert "variant" in head and "A [95%]" in head and "B [95%]" in head, r.stdout
    r = _ablate("plan", str(d), "--budget", "1", columns=80)
    assert r.returncode == 0, r.stderr
    _check(r.stdout, 80, "one_axis")
    assert "E[regret]" in r.stdout, r.stdout  # rich read "[regret]" as markup and printed "E"
    r = _ablate("compare", str(d), "--budget", "1", "--wide", columns=160)
    assert r.returncode == 0 and "R0 [95%]" in r.stdout and "C_mid [95%]" in r.stdout, r.stdout
