"""`ablate tune`: search recipe knobs with Optuna; every trial a real trainer run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ablate.cli.app import app
from ablate.cli.width import console
from ablate.studies.entry import TRAINER_ENTRY


@app.command()
def tune(
    space: Path = typer.Argument(..., help="Search space YAML, e.g. sweeps/tune_proxy.yaml."),
    results: Path = typer.Option(Path("results"), "--results", help="Results root folder."),
    trials: Optional[int] = typer.Option(None, "--trials", help="Total trials (default: the file's)."),
    as_json: bool = typer.Option(False, "--json", help="Print only JSON on stdout."),
    entry: str = typer.Option(TRAINER_ENTRY, "--entry", hidden=True),
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
    console().print(t)
