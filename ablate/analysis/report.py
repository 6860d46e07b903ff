"""`ablate report STUDY_DIR`: one self-contained HTML page with the answer of a study.

The page holds the study question (study.yaml), the ranking by asymptote A with intervals and
the shared-A verdicts for near-ties (ablate.analysis.compare), the curves with their fits and
extrapolation bands (one figure of all variants, one per variant; PNGs embedded as data: URIs
so the file can be mailed or attached to an issue), the runs' states with failures and
divergences (handed in by the CLI from ablate.studies.status, which asks the scheduler; else
as the run dirs record them, ablate.studydir), and the commands that reproduce it. No script, no external
resource: it renders the same offline, in a browser or a mail client.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import math
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ablate.errors import InputError, NoDataYet
from ablate.analysis.gather import is_study_dir
from ablate.study_record import StudyRecord
from ablate.studydir import (PROBLEM_STATES, STUDY, read_record, read_study_text, recorded_states,
                             where_to_look)
from ablate.analysis.labels import shorten
from trainer.rundir import read_status


@dataclass
class ReportData:
    """Everything the page shows (also what `report --json` prints, less the images)."""

    study_dir: str
    name: str
    question: str
    study_yaml: str
    x: str
    y: str
    ranking: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    problems: list[dict[str, Any]]  # failed / diverged / interrupted runs, with where to look
    commands: list[str]
    notes: list[str] = field(default_factory=list)
    figures: dict[str, str] = field(default_factory=dict)  # title -> base64 PNG
    answer: str = ""  # ablate.analysis.answer.answer_sentence: what `compare` prints on top
    baseline: Optional[str] = None
    window: dict[str, Any] = field(default_factory=dict)  # pipeline.Window.to_json() + "text"
    colors: dict[str, str] = field(default_factory=dict)  # variant -> its colour in every plot
    # The table names variants as compare and the answer sentence do: the values that differ,
    # the axes once in the legend (ablate.analysis.labels.shorten); the full label is the tooltip.
    legend: str = ""
    short: dict[str, str] = field(default_factory=dict)
    # The ranking's columns and notes in the words compare prints (ablate/analysis/ranking_text)
    columns: list = field(default_factory=list)
    row_notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()
                if k not in ("figures", "study_yaml", "columns", "row_notes")}


def _png_b64(curves, groups, colors: dict[str, str], extend_to: Optional[float] = None) -> str:
    from ablate.analysis.plots import plot_fits

    with tempfile.TemporaryDirectory() as d:
        p = plot_fits(curves, groups, Path(d) / "fig.png", extend_to=extend_to, colors=colors)
        return base64.b64encode(p.read_bytes()).decode("ascii")


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    return v


def _problems(study_dir: Path, states) -> list[dict[str, Any]]:
    out = []
    for s in states:
        if s.state in PROBLEM_STATES:
            out.append({"run_id": s.run_id, "name": s.name, "seed": s.seed, "state": s.state,
                        "step": s.step, "error": s.error or read_status(study_dir / s.run_id).get("reason"),
                        "look_at": where_to_look(study_dir, s)})
    return out


def option_flags(options) -> str:
    """The CLI flags that reproduce `options` (only those that differ from the defaults)."""
    from ablate.analysis.pipeline import Options

    q, dflt, flags = shlex.quote, Options(), []
    for name, flag in (("x", "--x"), ("y", "--y"), ("y_range", "--y-range"), ("by", "--by"),
                       ("step_cost", "--step-cost"),
                       ("min_compute", "--min-compute"), ("max_compute", "--max-compute"),
                       ("bins", "--bin"), ("method", "--method"), ("paper_grid", "--paper-grid"),
                       ("baseline", "--baseline"), ("margin", "--margin"),
                       ("budget", "--budget")):
        v = getattr(options, name)
        if name == "y_range" and v is not None:
            flags.append(f"{flag} {v[0]:g} {v[1]:g}")
            continue
        if v is not None and v != getattr(dflt, name):
            flags.append(f"{flag} {q(format(v, 'g') if isinstance(v, float) else str(v))}")
    return " ".join(flags)


def _study_file(study_dir: Path, text: str, name: str, base: Optional[str]) -> Optional[Path]:
    """The study file to sweep again: the study dir's own copy (study.yaml, the study as
    submitted) when it stands alone (no `base:`, or one that resolves from the study dir);
    else the original in the project the results live in (same text): the copy's `base:` is
    relative to the original's folder. The project is the study dir's parents (results/<study>
    sits in it) and the current folder, never ablate's own checkout: a study there with the
    same text is not the one these results came from (issue 32)."""
    if not text:
        return None
    own = study_dir.resolve() / STUDY
    if base is None or (own.parent / base).exists():
        return own
    roots = dict.fromkeys([*study_dir.resolve().parents[:3], Path.cwd().resolve()])
    for root in roots:
        for cand in (root / "recipes" / f"{name}.yaml", root / f"{name}.yaml"):
            if cand.is_file() and cand.read_text() == text:
                return cand.resolve()
    return None


def _commands(study_dir: Path, text: str, record: StudyRecord, options, runs) -> list[str]:
    """Commands that paste: absolute paths, the same analysis options as this page."""
    q = shlex.quote
    d = q(str(study_dir.resolve()))
    flags = option_flags(options)
    flags = f" {flags}" if flags else ""
    cmds = [f"ablate compare {d}{flags}   # the ranking and answer on this page",
            f"ablate report {d}{flags}"]
    name = record.name
    src = _study_file(study_dir, text, name, record.base)
    if src is not None:
        cmds.append(f"ablate sweep {q(str(src))} --wait --results /tmp/ablate-repro   "
                    "# train every run again, into a fresh folder")
        cmds.append(f"ablate compare /tmp/ablate-repro/{q(name)}{flags}")
    if runs:
        r = runs[0]
        cfg = study_dir.resolve() / r["run_id"] / "config.yaml"
        if cfg.is_file():
            cmds.append(f"ablate run {q(str(cfg))} --out /tmp/ablate-repro-run   # one run "
                        f"({r['name']}, seed {r['seed']}) from its exact config")
    return cmds


def collect(study_dir: Path, *, options=None, n_boot: Optional[int] = None,
            states: Optional[list] = None, **legacy: Any) -> ReportData:
    """Load, fit and rank through the pipeline `compare` uses (ablate.analysis.pipeline), and
    gather the run states of a study results dir: `states` as the caller read them with the
    scheduler's view (the CLI passes ablate.studies.status.study_states; the analysis layer
    does not ask schedulers), else as the run dirs record them. `legacy` (baseline, margin, method) are
    Options fields, kept for callers that pass them one by one."""
    from dataclasses import replace

    from ablate.analysis.answer import answer_sentence
    from ablate.analysis.pipeline import Options, analyze
    from ablate.analysis.plots import palette

    study_dir = Path(study_dir)
    if not is_study_dir(study_dir):
        raise InputError(f"{study_dir}: not a study results dir (no variants.json; run "
                         "`ablate sweep STUDY.yaml` first)")
    options = replace(options or Options(), **legacy)
    if n_boot is not None:
        options = replace(options, n_boot=n_boot)
    record, text = read_record(study_dir), read_study_text(study_dir)
    states = recorded_states(study_dir) if states is None else states
    from ablate.analysis.watch_store import status_verdicts  # `ablate status`'s watch column

    watched = status_verdicts(study_dir, [s.run_id for s in states])
    runs = [{**s.to_json(), **v.as_json(), "watch_cell": v.cell}
            for s, v in zip(states, watched)]
    data = ReportData(str(study_dir), record.name, record.description, text, "", "",
                      [], runs, _problems(study_dir, states),
                      _commands(study_dir, text, record, options, runs))
    try:
        a = analyze(study_dir, options)
    except NoDataYet as e:  # the page still shows the runs; any other InputError is bad input
        data.notes.append(f"no curves to fit yet: {e}")
        return data
    data.x, data.y = a.curves.x, a.curves.y
    data.ranking = [{k: _finite(v) for k, v in r.items()} for r in a.ranking_json()]
    data.answer, data.baseline = answer_sentence(a), a.baseline
    data.window = _finite({**a.window.to_json(), "text": a.window.text(a.curves.x)})
    colors = palette([g.variant for g in a.groups])
    data.colors = colors
    data.legend, data.short = shorten([r["variant"] for r in data.ranking])
    _ranking_text(data)
    if any(g.fit for g in a.groups):
        data.figures["All variants"] = _png_b64(a.curves, a.groups, colors)
        for g in a.groups:
            if g.fit is not None:
                sub = replace(a.curves, frame=a.curves.frame[a.curves.frame["variant"] == g.variant])
                data.figures[g.variant] = _png_b64(sub, [g], colors)
    return data


def _ranking_text(data: ReportData) -> None:
    """The ranking's columns as compare prints them (with --wide: every fit column), and each
    row's note, from the same rows and the same functions (ablate/analysis/ranking_text.py)."""
    from ablate.analysis.ranking_text import (fit_columns, note_text, p_beats_column,
                                              predicted_columns)

    rows = data.ranking
    base = data.short.get(data.baseline or "", data.baseline)
    data.columns = [*fit_columns(rows, wide=True), *predicted_columns(rows, None),
                    p_beats_column(rows, base)]
    data.row_notes = [note_text(r, r.get("note")) for r in rows]


def render(data: ReportData) -> str:
    """The HTML page (jinja2, autoescaped)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("ablate.analysis", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    counts: dict[str, int] = {}
    for r in data.runs:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    from ablate.analysis.ranking_text import PREDICTIVE

    return env.get_template("report.html.j2").render(
        d=data, counts=sorted(counts.items()), esc=html.escape, predictive=PREDICTIVE,
        generated=_dt.datetime.now().strftime("%Y-%m-%d %H:%M"))


def write_report(study_dir: Path, out: Optional[Path] = None, **kw: Any) -> tuple[Path, ReportData]:
    """Collect + render + write (atomically); returns the path and the data."""
    from trainer.rundir import atomic_write

    if not is_study_dir(Path(study_dir)):
        raise InputError(f"{study_dir}: not a study results dir (no variants.json; run "
                         "`ablate sweep STUDY.yaml` first)")
    out = Path(out) if out is not None else Path(study_dir) / "report.html"
    if out.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"--out {out}: the report is an .html file")
    if not out.parent.exists():
        raise InputError(f"--out {out}: folder {out.parent} does not exist")
    data = collect(Path(study_dir), **kw)
    atomic_write(out, render(data))
    return out, data

