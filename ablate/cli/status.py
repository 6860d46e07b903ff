"""`ablate status` (each run's state, and what an adaptive study stopped) and `ablate schema`
(the study file's JSON Schema)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ablate.cli.app import app
from ablate.cli.waiting import clip, one_line
from ablate.cli.width import console
from ablate.studydir import PROBLEM_STATES

if TYPE_CHECKING:
    from ablate.studydir import RunState


@app.command()
def status(
    study_dir: Path = typer.Argument(..., help="A study results dir, e.g. results/loss_agg."),
    as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout."),
    wide: bool = typer.Option(False, "--wide", help="Also show each run's job id and tries."),
) -> None:
    """Per-run state of a study (run dir files first; squeue/sacct add detail)."""
    from ablate.cli.render import status_table
    from ablate.studydir import budget_text, stopped_variants
    from ablate.analysis.sources import study_meant  # the folder rule compare and watch use
    from ablate.studies.status import study_states

    study_dir = study_meant(Path(study_dir))  # results/ (one study) or results/NAME/runs
    states = study_states(study_dir)
    from ablate.analysis.watch_store import status_verdicts  # `ablate watch`'s (watch.json)

    watched = status_verdicts(study_dir, [s.run_id for s in states])
    stopped = stopped_variants(study_dir)  # adaptive studies: which variants stopped, why
    from ablate.studies.measured import study_view  # planned vs measured (rates.json)

    con = console()
    rate_lines, rates = study_view(study_dir, max(60, con.width))
    if as_json:
        keys = ("run_id", "name", "seed", "state", "step", "progress", "job_id", "attempts",
                "error")
        print(json.dumps([{**{k: getattr(s, k) for k in keys}, "stopped": stopped.get(s.name),
                           **v.as_json(), **({"rates": rates[s.run_id]}
                                             if rates.get(s.run_id) else {})}
                          for s, v in zip(states, watched)]))
        return
    from ablate.cli.tables import Col

    cells = [v.cell for v in watched]
    con.print(status_table(con, _title(study_dir), states, wide,
                           (Col("watch", cells, justify="left", drop=5),) if any(cells) else ()))
    counts: dict[str, int] = {}
    for s in states:
        counts[s.state] = counts.get(s.state, 0) + 1
    con.print(" ".join(f"{k}={n}" for k, n in sorted(counts.items())))
    from ablate.cli.width import fold

    for line in fold(rate_lines, con.width):  # (the rates' table is laid out for the width)
        con.print(line, markup=False, highlight=False, soft_wrap=True)
    for name, why in stopped.items():
        con.print(f"stopped at stage {why['stage']} ({budget_text(why['budget'])}): {name}: "
                  f"{why['reason']}", style="yellow", markup=False)
    failed = [s for s in states if s.state in PROBLEM_STATES]  # a diverged run's why too
    # each failure's cause, one line (the table has no room for it): cut to the width
    # (ablate/cli/width.py); `--json` has it whole
    width = con.width
    for s in failed:
        con.print(clip(f"{s.state} {s.name} seed {s.seed}: {cause(s, study_dir)}", width),
                  style="red", markup=False, highlight=False, soft_wrap=True)
    # only files that exist: a run stopped before it started (queued) wrote no status.json
    traced = [s for s in failed if (Path(study_dir) / s.run_id / "status.json").is_file()]
    if traced:
        rid = traced[0].run_id if len(traced) == 1 else "<run_id>"
        con.print(f"traceback: {study_dir}/{rid}/status.json", style="dim", markup=False,
                  highlight=False, soft_wrap=True)
    if failed and (Path(study_dir) / "_submitit").is_dir():
        con.print(f"job logs: {study_dir}/_submitit/", style="dim", markup=False,
                  highlight=False, soft_wrap=True)
    stops = [s for s in states if s.state == "stopped"]
    if stops:  # stopped by the user: nothing failed, nothing lost
        which = ", ".join(f"{s.name} seed {s.seed} (step {s.step})" for s in stops)
        con.print(clip(f"stopped at a checkpoint: {which}", width), markup=False,
                  highlight=False, soft_wrap=True)
        con.print("`ablate sweep` of the study resumes them (a stop costs no attempt)",
                  markup=False, highlight=False, soft_wrap=True)


def _title(study_dir: Path) -> str:
    """"NAME (DIR)": the study's name from its record, and where it is."""
    from ablate.errors import InputError
    from ablate.studydir import read_record

    try:
        name = read_record(Path(study_dir)).name
    except InputError:  # a damaged record: the folder alone names it
        name = ""
    return f"{name} ({study_dir})" if name and name != Path(study_dir).name else str(study_dir)


def cause(s: RunState, study_dir: Optional[Path] = None) -> str:
    """Why a run ended without a verdict (or diverged), in words: the trainer's one-line error
    (status.json "error"), a divergence's reason, else what the scheduler says happened to its
    job."""
    if s.error:
        return one_line(s.error)
    if s.state == "diverged":
        from trainer.rundir import read_status

        why = read_status(Path(study_dir) / s.run_id).get("reason") if study_dir else None
        return (f"{why or 'non-finite loss or grad'} at step {s.step}; its last good "
                "checkpoint is kept")
    if s.state == "cancelled":
        return f"its job {s.job_id} was cancelled"
    if s.state == "interrupted":
        return (f"its job {s.job_id} ended before the run did (killed, timed out or the machine "
                "restarted); `ablate sweep` resumes it from its last checkpoint")
    return f"its job {s.job_id} ended {s.scheduler or 'without a verdict'} and the run wrote no error"


@app.command()
def schema() -> None:
    """Print the JSON Schema of the study file (point your editor's YAML plugin at it)."""
    from ablate.studies.schema import study_json_schema

    print(json.dumps(study_json_schema(), indent=2))
