"""`ablate sweep`: expand a study and launch what still needs to run (resumable); adaptive
studies (`stages:`) take one turn of their loop per call, or all of them with --wait."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence

import typer

from ablate.cli.app import app
from ablate.cli.width import console
from ablate.errors import InputError
from ablate.studies.entry import TRAINER_ENTRY

if TYPE_CHECKING:
    from ablate.studies.study import LoadedStudy
    from ablate.studies.sweep import SweepPlan
    from ablate.studydir import RunState


@app.command()
def sweep(
    study: Path = typer.Argument(..., help="Study YAML, e.g. recipes/loss_agg.yaml."),
    executor: Optional[str] = typer.Option(
        None, "--executor", "-e",
        help="local | slurm | debug. Default: the profile's, else slurm where `sinfo` works, "
        "else local.",
    ),
    profile: Optional[str] = typer.Option(
        None, "--profile", "-p", help="Launch profile: sweeps/NAME.yaml or a bare NAME."
    ),
    results: Path = typer.Option(Path("results"), "--results", help="Results root folder."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print where the jobs would go, the "
                                 "expansion and each run's GPU memory plan (against the "
                                 "profile's gpu_memory_gib) and time plan (step, eval, wall "
                                 "and GPU-hours to the budget, requeues); run nothing."),
    force: bool = typer.Option(False, "--force", help="Submit even variants whose memory plan "
                               "does not fit the profile's GPUs, or whose time plan cannot "
                               "reach the budget under the profile's time limit and requeues, "
                               "or that needs GPUs where the Slurm jobs get none (with "
                               "--dry-run: show the plan anyway)."),
    as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout."),
    wait: bool = typer.Option(False, "--wait", help="Block until all runs end, with a live "
                              "per-run view (state, step / budget) and where to look when a "
                              "run fails."),
    within_: Optional[str] = typer.Option(
        None, "--within", metavar="DURATION",
        help="Propose a study that fits this time (14d, 36h, 2w) on the study's nodes "
        "(slurm.study_nodes, else the partition's from `sinfo`, else the profile's): budget "
        "per run (the paper's stages: ~3.5-4k GPU-hours single-axis, 16k leave-one-out), "
        "seeds, nodes per run and the margin on A that buys; writes it as a study YAML (--out) "
        "and runs nothing."),
    out: Optional[Path] = typer.Option(
        None, "--out", help="With --within: where the proposed study is written (default "
        "./NAME_within_DURATION.yaml; a changed profile goes beside it)."),
    entry: str = typer.Option(TRAINER_ENTRY, "--entry", hidden=True,
                              help="module:function each job calls (tests)."),
    override: list[str] = typer.Option(
        [], "--override", metavar="KEY=VALUE",  # no -o: that is --out (ablate report)
        help="KEY=VALUE on top of the study for every run (dotted TrainConfig key, YAML value; "
        "repeatable), e.g. --override model.name_or_path=/models/qwen3-8b "
        "--override task.path=data/polaris.jsonl. Existing relative paths become absolute. "
        "seeds=[0] replaces the study's seeds instead (a quick one-seed pass), and "
        "'axes.KEY=[a,b]' one axis' values (the same runs as the full study's).",
    ),
) -> None:
    """Expand a study into runs and launch the ones not done, queued or running.

    Safe to re-run after anything breaks: finished runs are skipped, failed ones are resubmitted
    up to the study's max_attempts, and adding a value to an axis adds only the new runs.
    """
    from ablate.shipped import recipe_arg
    from ablate.studies.study import load_study
    from ablate.studies.sweep import plan_sweep, run_sweep

    study = recipe_arg(study, "study", studies=True)  # a shipped study by name, from any folder

    if within_ is not None:
        from ablate.cli.within import within

        return within(study, within_, executor=executor, profile=profile, overrides=override,
                      out=out, as_json=as_json)
    if out is not None:
        raise InputError("--out: only with --within (where the proposed study is written)")
    if dry_run:
        from ablate.cli.dryrun import dry_run as print_dry_run

        return print_dry_run(study, executor=executor, profile=profile, overrides=override,
                             as_json=as_json, results=results, force=force)
    loaded = load_study(study, override)  # once: every step below is handed the result
    if loaded.study.stages is not None:
        if override:
            raise InputError(f"{study}: --override is not supported for a staged study; put "
                             "the values in its `overrides:` section")
        adaptive_sweep(study, loaded, executor=executor, profile=profile, results=results,
                       entry=entry, wait=wait, as_json=as_json)
        return
    plan = plan_sweep(loaded, executor=executor, profile=profile, results=results,
                      force=force)
    out = run_sweep(plan, entry=entry)
    failed: list[RunState] = []
    if wait:
        from ablate.cli.waiting import failed_runs, watch_or_stop

        failed = failed_runs(watch_or_stop(plan.store.root, study, show=not as_json))
        out["failed"] = [s.run_id for s in failed]
    if as_json:
        print(json.dumps(out))
    else:
        print_sweep(plan, out, wait, failed, study)
    if failed:  # runs that ended without a verdict: a script must not read this as success
        raise typer.Exit(1)


def print_sweep(plan: SweepPlan, out: dict[str, Any], waited: bool,
                failed: Sequence[RunState] = (), study: Optional[Path] = None) -> None:
    """What `ablate sweep` prints for a plain study: counts, what was skipped and why, then the
    answer (after --wait; not when every run failed: there is nothing to answer from) and
    which runs failed, or the command to follow the runs."""
    con = console()
    con.print(f"[bold]{plan.loaded.study.name}[/]: {len(plan.variants)} run{'' if len(plan.variants) == 1 else 's'}, "
              f"submitted {len(out['submitted'])} via {out['executor']}, skipped "
              f"{len(out['skipped'])}  ->  {out['study_dir']}")
    for rid, why in plan.skipped.items():
        con.print(f"  skipped {rid}: {why}", style="dim")
    if waited:
        from ablate.analysis.answer import study_answer
        from ablate.cli.waiting import failure_lines

        if len(failed) < len(plan.variants):
            con.print(study_answer(out["study_dir"]), markup=False, highlight=False)
        if failed:
            for line in failure_lines(failed, len(plan.variants), out["study_dir"],
                                      study or plan.loaded.path, con.width):
                con.print(line, style="red", markup=False, highlight=False)
    else:
        con.print(f"follow with: ablate status {out['study_dir']}")


def adaptive_sweep(study: Path, loaded: LoadedStudy, *, executor: Optional[str],
                   profile: Optional[str],
                   results: Path, entry: str, wait: bool, as_json: bool) -> None:
    """What `ablate sweep` prints for an adaptive study (one with `stages:`)."""
    from ablate.cli.waiting import failed_runs, failure_lines, watch_or_stop
    from ablate.studies.adaptive import run_adaptive
    from ablate.studies.status import study_states
    from ablate.studydir import budget_text

    rep = run_adaptive(loaded, executor=executor, profile=profile, results=results, entry=entry,
                       wait_for=(lambda d: watch_or_stop(d, study, show=not as_json))
                       if wait else None)
    failed = failed_runs(study_states(Path(rep.study_dir))) if wait else []
    if as_json:
        print(json.dumps({**rep.to_json(), **({"failed": [s.run_id for s in failed]}
                                                if wait else {})}))
        if failed:
            raise typer.Exit(1)
        return
    con = console()
    n = len(rep.budgets)
    shown = min(rep.stage, n - 1)
    con.print(f"[bold]{Path(rep.study_dir).name}[/]: adaptive, stage {shown + 1} of {n} "
              f"(budget {budget_text(rep.budgets[shown])}), submitted {len(rep.submitted)} via "
              f"{rep.executor}, skipped {len(rep.skipped)}  ->  {rep.study_dir}")
    for d in rep.decisions:
        for v, why in d["stopped"].items():
            con.print(f"  stopped {v}: {why}", style="yellow")
    if rep.finished:
        from ablate.analysis.answer import study_answer

        # The sentence says what happened: who reached the final budget, who was stopped
        # where, and a lone survivor left unscaled (scale_winner: false).
        con.print(f"finished: {study_answer(rep.study_dir)}", markup=False, highlight=False)
        con.print(f"details: ablate compare {rep.study_dir}", markup=False, highlight=False)
    elif not wait:
        con.print(f"follow with: ablate status {rep.study_dir}; rerun this `ablate sweep` "
                  "when the stage's runs end to fit, stop and promote")
    if failed:
        for line in failure_lines(failed, len(study_states(Path(rep.study_dir))),
                                  rep.study_dir, study, con.width):
            con.print(line, style="red", markup=False, highlight=False)
        raise typer.Exit(1)
