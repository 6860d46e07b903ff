"""`ablate run CONFIG.yaml --out RUN_DIR`: one trainer run (resumes if RUN_DIR has a checkpoint).

The config is validated against trainer.config.TrainConfig before anything is written, so a
typo exits 2 with the offending key and nothing on disk.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import typer

from ablate.cli.app import app
from ablate.errors import InputError
from trainer import rundir
from trainer.rundir import read_status


def load_train_config(path: Path):
    """Parse + validate a TrainConfig YAML (a recipe, `base:` chains included) with the same
    loader and one-line, file:line messages as study files."""
    from ablate.adapters.builtin import load_recipe, validate_config
    from ablate.yamlio import load_yaml

    # A shipped recipe by name (`ablate run proxy.yaml` from the user's own folder): the same
    # lookup as a study's `base:` (ablate/shipped.py); a user's file of that name wins.
    from ablate.shipped import recipe_arg

    path = recipe_arg(path, "TrainConfig YAML")
    data = load_yaml(path).data
    if isinstance(data, dict) and ("axes" in data or "seeds" in data or "name" in data):
        raise InputError(f"{path}: this is a study (has name/axes/seeds); run it with "
                         "`ablate sweep`, or give `ablate run` a plain TrainConfig YAML")
    tree, prov, _ = load_recipe(path)
    cfg = validate_config(tree, prov, str(path))
    check_combination(path, cfg)
    return cfg


def check_combination(path: Path, cfg) -> None:
    """Refuse what the trainer would refuse at start (trainer/validate.py), before anything is
    written. The machine's own shape (GPUs) is checked by the trainer itself at start."""
    from ablate.adapters.builtin import problems

    found = problems(cfg)
    if found:
        raise InputError(f"{path}: {found[0]}")


@app.command("run")
def run_cmd(
    config: Path = typer.Argument(..., help="TrainConfig YAML (e.g. recipes/proxy.yaml)."),
    out: Path = typer.Option(..., "--out", help="Run directory; resumes if it holds a checkpoint."),
    json_out: bool = typer.Option(False, "--json", help="Print the final status as JSON only."),
) -> None:
    """Run one RL training job (the trainer every sweep job runs) into the --out folder."""
    cfg = load_train_config(config)
    from ablate.adapters.builtin import train

    done = threading.Event()
    if not json_out:
        threading.Thread(target=_progress, args=(out, cfg.budget.steps, done), daemon=True).start()
    try:
        train(cfg, out, str(config))  # a proxy warm-up that cannot reach its target: one line
    finally:
        done.set()
    status = read_status(out)
    if json_out:
        print(json.dumps(status))
        return
    from ablate.cli.width import console

    try:
        last = rundir.last_metrics_row(out) or {}
    except rundir.MetricsError as e:
        raise InputError(str(e)) from None
    console().print(f"[bold]{status['state']}[/] at step {status['step']} -> {out}  "
                    f"{rundir.PASS_RATE}={last.get(rundir.PASS_RATE, float('nan')):.3f}")
    if status["state"] != rundir.RunState.DONE:
        raise typer.Exit(1)


def _progress(run_dir: Path, total: int | None, done: threading.Event) -> None:
    """A progress bar fed by status.json (the trainer's own record of where it is)."""
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task("training", total=total)
        while not done.wait(0.5):
            st = read_status(run_dir)
            if not st:
                continue  # not written yet
            bar.update(task, completed=st.get("step", 0), description=st.get("state", ""))
