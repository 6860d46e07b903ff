"""CLI commands for studies: `sweep` (expand + launch, resumable), `status`, `schema`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from ablate.cli import app


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
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the expansion and each run's "
                                 "GPU memory plan (against the profile's gpu_memory_gib); run "
                                 "nothing."),
    force: bool = typer.Option(False, "--force", help="Submit even variants whose memory plan "
                               "does not fit the profile's GPUs."),
    as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout."),
    wait: bool = typer.Option(False, "--wait", help="Block until all runs end, with a live "
                              "per-run view (state, step / budget) and where to look when a "
                              "run fails."),
    entry: str = typer.Option("trainer:run", "--entry", hidden=True,
                              help="module:function each job calls (tests)."),
    override: list[str] = typer.Option(
        [], "--override",  # no -o: that is --out (ablate report); one meaning per short option
        help="KEY=VALUE on top of the study for every run (dotted TrainConfig key, YAML value; "
        "repeatable), e.g. --override model.name_or_path=/models/qwen3-8b "
        "--override task.path=data/polaris.jsonl. Existing relative paths become absolute.",
    ),
) -> None:
    """Expand a study into runs and launch the ones not done, queued or running.

    Safe to re-run after anything breaks: finished runs are skipped, failed ones are resubmitted
    up to the study's max_attempts, and adding a value to an axis adds only the new runs.
    """
    from ablate.studies.sweep import plan_sweep, run_sweep

    if dry_run:
        from ablate.studies.sweep import check_inputs

        from ablate.cli.dryrun import print_dry_run

        _, variants, prof = check_inputs(study, executor=executor, profile=profile,
                                         overrides=override)
        print_dry_run(str(study), variants, prof.job_shape(executor), as_json)
        return
    from ablate.studies.stages import has_stages

    if has_stages(study):
        from ablate.cli.stages import adaptive_sweep
        from ablate.errors import InputError

        if override:
            raise InputError(f"{study}: --override is not supported for a staged study; put "
                             "the values in its `overrides:` section")

        adaptive_sweep(study, executor=executor, profile=profile, results=results,
                       entry=entry, wait=wait, as_json=as_json)
        return
    plan = plan_sweep(study, executor=executor, profile=profile, results=results,
                      overrides=override, force=force)
    out = run_sweep(plan, entry=entry)
    if wait:
        from ablate.studies.progress import watch

        watch(plan.store.root)
    if as_json:
        print(json.dumps(out))
        return
    con = Console()
    con.print(f"[bold]{plan.loaded.study.name}[/]: {len(plan.variants)} runs, "
              f"submitted {len(out['submitted'])} via {out['executor']}, skipped "
              f"{len(out['skipped'])}  ->  {out['study_dir']}")
    for rid, why in plan.skipped.items():
        con.print(f"  skipped {rid}: {why}", style="dim")
    if wait:
        from ablate.analysis.answer import study_answer

        con.print(study_answer(out["study_dir"]), markup=False, highlight=False)
    else:
        con.print(f"follow with: ablate status {out['study_dir']}")


@app.command()
def status(
    study_dir: Path = typer.Argument(..., help="A study results dir, e.g. results/loss_agg."),
    as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout."),
    wide: bool = typer.Option(False, "--wide", help="Also show each run's job id and tries."),
) -> None:
    """Per-run state of a study (run dir files first; squeue/sacct add detail)."""
    from ablate.cli.render import status_table
    from ablate.studies.stages import budget_text, stopped_variants
    from ablate.studies.status import study_states

    states = study_states(study_dir)
    stopped = stopped_variants(study_dir)  # adaptive studies: which variants stopped, why
    if as_json:
        keys = ("run_id", "name", "seed", "state", "step", "progress", "job_id", "attempts",
                "error")
        print(json.dumps([{**{k: getattr(s, k) for k in keys}, "stopped": stopped.get(s.name)}
                          for s in states]))
        return
    con = Console()
    con.print(status_table(con, str(study_dir), states, wide))
    counts: dict[str, int] = {}
    for s in states:
        counts[s.state] = counts.get(s.state, 0) + 1
    con.print(" ".join(f"{k}={n}" for k, n in sorted(counts.items())))
    for name, why in stopped.items():
        con.print(f"stopped at stage {why['stage']} ({budget_text(why['budget'])}): {name}: "
                  f"{why['reason']}", style="yellow", markup=False)


@app.command()
def schema() -> None:
    """Print the JSON Schema of the study file (point your editor's YAML plugin at it)."""
    from ablate.studies.schema import study_json_schema

    print(json.dumps(study_json_schema(), indent=2))


@app.command()
def tune(
    space: Path = typer.Argument(..., help="Search space YAML, e.g. sweeps/tune_proxy.yaml."),
    results: Path = typer.Option(Path("results"), "--results", help="Results root folder."),
    trials: Optional[int] = typer.Option(None, "--trials", help="Total trials (default: the file's)."),
    as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout."),
    entry: str = typer.Option("trainer:run", "--entry", hidden=True),
) -> None:
    """Search recipe knobs with Optuna (TPE); every trial is a real trainer run.

    Trials live in <results>/<name>/optuna.db: re-running continues the search, and a config
    that was already trained is never trained again.
    """
    from ablate.studies.tune import tune as run_tune

    out = run_tune(space, results, n_trials=trials, entry=entry, show=not as_json)
    if as_json:
        print(json.dumps(out))
        return
    t = Table(title=f"tune {out['name']}: {len(out['trials'])} trials")
    for col in ("#", "state", "value", "params"):
        t.add_column(col, overflow="fold")
    best = out["best"]["number"] if out["best"] else None
    for tr in out["trials"]:
        style = "bold green" if tr["number"] == best else ""
        value = "" if tr["value"] is None else f"{tr['value']:.4g}"
        t.add_row(str(tr["number"]), tr["state"], value, json.dumps(tr["params"]), style=style)
    Console().print(t)
