"""`ablate run CONFIG.yaml --out RUN_DIR`: one trainer run (resumes if RUN_DIR has a checkpoint).

The config is validated against trainer.config.TrainConfig before anything is written, so a
typo exits 2 with the offending key and nothing on disk.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import typer
import yaml
from pydantic import ValidationError

from ablate.cli import app
from ablate.errors import InputError


def load_train_config(path: Path):
    """Parse + validate a TrainConfig YAML; every problem becomes a one-line InputError."""
    from trainer.config import TrainConfig

    if not path.is_file():
        raise InputError(f"{path}: no such file (expected a TrainConfig YAML, e.g. recipes/proxy.yaml)")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "?"
        raise InputError(f"{path}: {where}: invalid YAML ({getattr(e, 'problem', e)})") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: top level must be a mapping of TrainConfig sections")
    if "axes" in data or "base" in data:
        raise InputError(f"{path}: this is a study (has 'base'/'axes'); run it with "
                         "`ablate sweep`, or give `ablate run` a plain TrainConfig YAML")
    try:
        return TrainConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(x) for x in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key; valid keys here: " + ", ".join(_valid_keys(TrainConfig, err["loc"][:-1]))
        raise InputError(f"{path}: {key}: {msg} (got {err.get('input')!r})") from None


def _valid_keys(model, loc) -> list[str]:
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not hasattr(field.annotation, "model_fields"):
            return []
        model = field.annotation
    return sorted(model.model_fields)


@app.command("run")
def run_cmd(
    config: Path = typer.Argument(..., help="TrainConfig YAML (e.g. recipes/proxy.yaml)."),
    out: Path = typer.Option(..., "--out", help="Run directory; resumes if it holds a checkpoint."),
    json_out: bool = typer.Option(False, "--json", help="Print the final status as JSON only."),
) -> None:
    """Run one RL training job (the trainer every sweep job runs) into RUN_DIR."""
    cfg = load_train_config(config)
    import trainer

    done = threading.Event()
    if not json_out:
        threading.Thread(target=_progress, args=(out, cfg.budget.steps, done), daemon=True).start()
    try:
        trainer.run(cfg, out)
    finally:
        done.set()
    status = json.loads((out / "status.json").read_text())
    if json_out:
        print(json.dumps(status))
        return
    from rich.console import Console

    last = {}
    lines = (out / "metrics.jsonl").read_text().splitlines()
    if lines:
        last = json.loads(lines[-1])
    Console().print(f"[bold]{status['state']}[/] at step {status['step']} -> {out}  "
                    f"eval/pass_rate={last.get('eval/pass_rate', float('nan')):.3f}")
    if status["state"] != "done":
        raise typer.Exit(1)


def _progress(run_dir: Path, total: int | None, done: threading.Event) -> None:
    """A progress bar fed by status.json (the trainer's own record of where it is)."""
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task("training", total=total)
        while not done.wait(0.5):
            try:
                st = json.loads((run_dir / "status.json").read_text())
            except (OSError, ValueError):
                continue
            bar.update(task, completed=st.get("step", 0), description=st.get("state", ""))
