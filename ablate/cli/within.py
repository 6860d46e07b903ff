"""`ablate sweep STUDY --within 14d`: print the study that fits the time and the study's nodes,
and write it as a study YAML (ablate/studies/sizing.py searches, ablate/studies/proposal.py
writes). Nothing is run or submitted."""

from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path
from typing import Optional

from ablate.number_text import count
from ablate.analysis.resolution import HOW, MAX_USEFUL_SEEDS, MEANS, SOURCE
from ablate.errors import InputError
from ablate.studies.capacity import wall_text


def _days(h: float) -> str:
    return f"{h / 24:.1f} d"


def label_of(text: str) -> str:
    """`14d` -> `14d`, `1.5 d` -> `1.5d`: the duration as it can stand in a study name."""
    return re.sub(r"[^A-Za-z0-9.]", "", text)


def table(s, chosen, width: int = 100) -> list[str]:
    """The options the search tried, the chosen one marked, laid out for `width`
    (ablate/cli/tables.py: every option one line, the least telling columns left out)."""
    import io

    from rich.console import Console

    from ablate.cli.tables import Col, table as layout

    heads = [("seeds", True, 0), ("budget GPU-h", True, 0), ("held GPU-h", False, 2),
             ("nodes/run", False, 4), ("at once", False, 3), ("wall", True, 0),
             ("margin A", False, 1), ("", True, 0)]
    rows = [(str(o.seeds), f"{o.budget:,.0f}" + ("" if o.paper else "*"),
             f"{o.run_gpu_hours:,.0f}", str(o.nodes_per_run),
             str(o.cap.runs_at_once), _days(o.study_wall_h), f"{o.margin:.3f}",
             "<- proposed" if o is chosen else ("fits" if o.study_wall_h <= s.within_h else ""))
            for o in s.tried]
    cols = [Col(h, [r[i] for r in rows], justify="left", unbroken=True, keep=keep, drop=drop)
            for i, (h, keep, drop) in enumerate(heads)]
    con = Console(width=width - 2, file=io.StringIO(), record=True, color_system=None)
    con.print(layout(con, "", cols))
    return [("  " + x).rstrip() for x in con.export_text().splitlines() if x.strip()]


def nothing_fits(study: Path, text: str, s, variants, prof, sizer) -> InputError:
    """One line: what the smallest study takes here, and the time or nodes that would do
    (`sizer`: the executor that sized it, launch/executor.py GpuNodes, names its key)."""
    from ablate.studies.sizing import STAGE_BUDGETS, nodes_for, run_walls

    p = s.paper_smallest or s.smallest
    if p is None:
        _, why = run_walls(sizer, variants, prof, STAGE_BUDGETS[s.stage][0],
                           sizer.nodes_per_run(prof))
        return InputError(f"{study}: --within {text}: not every variant can run on the "
                          f"profile's GPUs at the paper's {s.stage} budget ({why}); "
                          "`ablate sweep --dry-run` shows its plans")
    need = nodes_for(sizer, variants, prof, s.within_h, p.budget)
    more = f", or {need} nodes ({sizer.key('study_nodes')}: {need})" if need else ""
    floor = (f"; {s.smallest.budget:,.0f} GPU-hours (twice the fit window's start) "
             f"{_days(s.smallest.study_wall_h)}" if s.smallest and s.smallest is not p else "")
    return InputError(
        f"{study}: --within {text}: no study of its {s.variants} variants fits "
        f"{_days(s.within_h)} on {s.nodes.nodes.text()}: the paper's smallest {s.stage} stage "
        f"(1 seed x {p.budget:,.0f} GPU-hours a run, {count(p.nodes_per_run, 'node')} a run) takes "
        f"{_days(p.study_wall_h)} here{floor}; allow --within {math.ceil(p.study_wall_h / 24)}d"
        f"{more}")


def summary(study: Path, text: str, s, o) -> list[str]:
    budget = (f"the paper's {s.stage} stage" if o.paper else
              f"below the paper's {s.stage} stage: the largest that fits; A is less certain "
              "there, so the margin is a lower bound")
    seeds = ("" if o.seeds >= MAX_USEFUL_SEEDS else
             f" (more seeds did not fit; {MAX_USEFUL_SEEDS} would reach compare's 0.02)")
    return [f"{study} within {text}: {count(o.runs, 'run')} ({count(s.variants, 'variant')} x "
            f"{count(o.seeds, 'seed')}), "
            f"{o.budget:,.0f} GPU-hours of training and {count(o.nodes_per_run, 'node')} a run",
            *textwrap.wrap(
                f"GPU-hours held (GPUs x wall, as the dry run plans): ~{o.run_gpu_hours:,.0f} a "
                f"run, ~{o.study_gpu_hours:,.0f} the study; beyond the training budget "
                "(budget.gpu_hours, the fit's x axis) they hold evals, checkpoints, job starts "
                "and requeues", 94, initial_indent="  ", subsequent_indent="    "),
            f"  budget: {budget} (ScaleRL, arXiv 2510.13786)",
            f"  seeds: {o.seeds}{seeds}",
            f"  nodes: {o.cap.text()}",
            f"  time: {wall_text(o.study_wall_h)}, each run ~{o.run_wall_h:,.0f} h; queue waits "
            "not counted",
            f"  margin on A: {o.margin:.3f}, {MEANS}",
            # where it comes from: an explanation, folded to fit 100 columns
            *textwrap.wrap(SOURCE, 92, initial_indent="    ", subsequent_indent="    ")]


def within(study: Path, text: str, *, executor: Optional[str], profile: Optional[str],
           overrides: list[str], out: Optional[Path], as_json: bool) -> None:
    """Size, print and write the proposal; one-line InputError when nothing fits."""
    from ablate.studies.proposal import write_proposal
    from ablate.studies.sizing import check_sizable, parse_within, size_study
    from ablate.studies.sweep import check_inputs, intended_executor

    hours = parse_within(text)
    loaded, variants, prof = check_inputs(study, executor=executor, profile=profile,
                                          overrides=overrides)
    sizer = check_sizable(str(study), loaded, variants, prof, intended_executor(executor, prof))
    s = size_study(sizer, loaded, variants, prof, hours)
    o = s.chosen
    if o is None:
        raise nothing_fits(study, text, s, variants, prof, sizer)
    name = f"{loaded.study.name}_within_{label_of(text)}"
    out = out or Path(f"{name}.yaml")
    lines = summary(study, text, s, o)
    cmd = " ".join(["ablate sweep", str(study), f"--within {text}",
                    *(f"--profile {profile}" for _ in [0] if profile),
                    *(f"--override {x}" for x in overrides)])
    yaml_text, prof_text = write_proposal(sizer, loaded, o, out, name, [cmd, *lines], profile)
    wrote = [str(out)] + ([str(out.with_name(out.stem + ".profile.yaml"))] if prof_text else [])
    if as_json:
        print(json.dumps({"study": str(study), "within_h": hours, "stage": s.stage,
                          "nodes": s.nodes.to_json(), "proposal": {**o.to_json(), "how": HOW},
                          "tried": [t.to_json() for t in s.tried], "wrote": wrote,
                          "study_yaml": yaml_text, "profile_yaml": prof_text}))
        return
    from ablate.cli.width import columns, fold

    rows = table(s, o, columns())  # laid out for the width
    print("\n".join(fold([*lines, "", "considered (* below the paper's stage budget; held: a "
                          "run's GPUs x its wall; wall: the study's):", *rows, "",
                          f"wrote {' and '.join(wrote)}; check it with: ablate sweep {out} "
                          "--dry-run"], columns(), keep=rows)))
