"""`ablate report STUDY_DIR`: one self-contained HTML page with the answer of a study.

The page holds the study question (study.yaml), the ranking by asymptote A with intervals and
the shared-A verdicts for near-ties (ablate.analysis.compare), the curves with their fits and
extrapolation bands (one figure of all variants, one per variant; PNGs embedded as data: URIs
so the file can be mailed or attached to an issue), the runs' states with failures and
divergences (ablate.studies.status), and the commands that reproduce it. No script, no external
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

import yaml

from ablate.errors import InputError
from ablate.analysis import A_MARGIN
from ablate.analysis.gather import is_study_dir
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

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("figures", "study_yaml")}


def _png_b64(curves, groups, extend_to: Optional[float] = None) -> str:
    from ablate.analysis.plots import plot_fits

    with tempfile.TemporaryDirectory() as d:
        p = plot_fits(curves, groups, Path(d) / "fig.png", extend_to=extend_to)
        return base64.b64encode(p.read_bytes()).decode("ascii")


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, (list, tuple)):
        return [_finite(x) for x in v]
    return v


def collect(study_dir: Path, *, baseline: Optional[str] = None, margin: float = A_MARGIN,
            method: str = "default", n_boot: Optional[int] = None) -> ReportData:
    """Load, fit, rank and gather the run states of a study results dir."""
    from ablate.analysis.compare import compare
    from ablate.analysis.fit import N_BOOT
    from ablate.analysis.fitgroups import fit_groups
    from ablate.studies.progress import where_to_look
    from ablate.analysis.sources import Curves, load
    from ablate.studies.status import study_states

    study_dir = Path(study_dir)
    if not is_study_dir(study_dir):
        raise InputError(f"{study_dir}: not a study results dir (no variants.json; run "
                         "`ablate sweep STUDY.yaml` first)")
    text = (study_dir / "study.yaml").read_text() if (study_dir / "study.yaml").is_file() else ""
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise InputError(f"{study_dir / 'study.yaml'}: not valid YAML "
                         f"({str(e).splitlines()[0]})") from None
    doc = doc if isinstance(doc, dict) else {}
    name = str(doc.get("name") or study_dir.name)
    states = study_states(study_dir)
    runs = [s.to_json() for s in states]
    problems = []
    for s in states:
        if s.state in ("failed", "diverged", "interrupted", "cancelled"):
            rd = study_dir / s.run_id
            problems.append({"run_id": s.run_id, "name": s.name, "seed": s.seed,
                             "state": s.state, "step": s.step,
                             "error": s.error or read_status(rd).get("reason"),
                             "look_at": where_to_look(study_dir, s)})
    ranking: list[dict[str, Any]] = []
    notes: list[str] = []
    figures: dict[str, str] = {}
    x = y = ""
    try:
        curves = load(study_dir)
    except InputError as e:  # no metrics yet: the page still shows the runs
        notes.append(f"no curves to fit yet: {e}")
        curves = None
    if curves is not None:
        x, y = curves.x, curves.y
        groups = fit_groups(curves, method=method, n_boot=N_BOOT if n_boot is None else n_boot)
        if baseline is not None and baseline not in curves.variants():
            raise InputError(f"--baseline {baseline!r}: no such variant; variants: "
                             + ", ".join(curves.variants()))
        for r in compare(groups, baseline=baseline, margin=margin,
                         n_boot=N_BOOT if n_boot is None else n_boot):
            ranking.append({k: _finite(v) for k, v in r.as_dict().items()})
        if any(g.fit for g in groups):
            figures["All variants"] = _png_b64(curves, groups)
            for g in groups:
                sub = Curves(curves.frame[curves.frame["variant"] == g.variant], curves.source,
                             curves.x, curves.y, curves.defaults)
                if g.fit is not None:
                    figures[g.variant] = _png_b64(sub, [g])
    q = shlex.quote
    d = q(str(study_dir))
    commands = [
        "pip install torch==2.13.0 && pip install -e .   # in the ablate checkout",
        f"ablate sweep path/to/{q(name)}.yaml   # the study file shown below (its base: "
        "recipe beside it); re-running skips finished runs",
        f"ablate status {d}",
        f"ablate compare {d} --margin {margin:g}" + (f" --baseline {q(baseline)}" if baseline else "")
        + (f" --method {method}" if method != "default" else ""),
        f"ablate report {d}",
    ]
    return ReportData(str(study_dir), name, str(doc.get("description") or ""), text, x, y,
                      ranking, runs, problems, commands, notes, figures)


def render(data: ReportData) -> str:
    """The HTML page (jinja2, autoescaped)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("ablate.analysis", "templates"),
                             autoescape=jinja2.select_autoescape(["html", "j2"]),
                             undefined=jinja2.StrictUndefined)
    env.filters["num"] = _num
    env.filters["ci"] = _ci
    counts: dict[str, int] = {}
    for r in data.runs:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    return env.get_template("report.html.j2").render(
        d=data, counts=sorted(counts.items()), esc=html.escape,
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



def _num(v: Any, fmt: str = ".3g") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    return format(v, fmt)


def _ci(v: Any, fmt: str = ".3f") -> str:
    if not v or v[0] is None or v[1] is None:
        return ""
    return f"[{format(v[0], fmt)}, {format(v[1], fmt)}]"
