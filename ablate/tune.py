"""`ablate tune`: Optuna search over recipe knobs, each trial a real trainer run.

A search space (sweeps/tune_*.yaml) names a base recipe, fixed overrides, and per dotted
TrainConfig path either a numeric range or a list of choices. Trials are stored in an Optuna
SQLite file in the results dir, and each trial's run dir is named by the config hash like a
study's, so an interrupted `ablate tune` picks up where it stopped and never trains the same
config twice.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ablate.errors import InputError
from ablate.expand import run_id_of
from ablate.store import atomic_write, study_dir_for
from ablate.study import (Provenance, _NAME_RE, check_config_path, load_model,
                          resolve_base, set_path, validate_config)
from ablate.yamlio import YamlDoc
from trainer.config import BudgetConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Param(_Strict):
    """A numeric range (low/high, optionally log) or a list of choices."""

    low: Optional[float] = None
    high: Optional[float] = None
    log: bool = False
    integer: bool = Field(False, description="Sample integers in [low, high].")
    choices: Optional[list[Union[bool, int, float, str, None]]] = None

    @model_validator(mode="after")
    def _shape(self) -> "Param":
        if self.choices is not None:
            if not self.choices or self.low is not None or self.high is not None:
                raise ValueError("give either non-empty `choices` or `low`/`high`, not both")
        elif self.low is None or self.high is None or not self.low < self.high:
            raise ValueError("a range needs low < high (or use `choices`)")
        elif self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        return self


class Objective(_Strict):
    metric: str = Field("eval/pass_rate", description="Column of metrics.jsonl.")
    reduce: Literal["last", "max", "mean_last_3"] = Field("last", description="Over eval points.")
    direction: Literal["maximize", "minimize"] = "maximize"


class TuneSpace(_Strict):
    name: str = Field(description="Results go to <results>/<name>/ (optuna.db + run dirs).")
    base: Optional[str] = Field(None, description="Recipe YAML, relative to this file.")
    overrides: dict[str, Any] = Field(default_factory=dict, description="Fixed changes to the base.")
    params: dict[str, Param] = Field(min_length=1, description="Dotted TrainConfig path -> range.")
    objective: Objective = Field(default_factory=Objective)
    n_trials: int = Field(10, ge=1, description="Total trials (a rerun only adds the missing ones).")
    seed: int = Field(0, description="Seed of the sampler and of every trial's run.")
    budget: Optional[BudgetConfig] = Field(None, description="Replaces TrainConfig.budget.")


def load_space(path: Path) -> tuple[TuneSpace, dict[str, Any], Provenance, YamlDoc]:
    """Validate a search space and resolve its base (nothing written)."""
    space, doc = load_model(path, TuneSpace, "a search space must be a mapping with name and params")
    if not _NAME_RE.match(space.name) or ".." in space.name:
        raise InputError(f"{doc.where(('name',))}: name '{space.name}' must be a plain folder name")
    tree, prov, _ = resolve_base(doc, space.base, space.overrides, space.budget)
    for dotted, p in space.params.items():
        where = doc.where(("params", dotted))
        check_config_path(dotted, where, "param")
        for v in p.choices if p.choices is not None else [p.low, p.high]:
            v = int(v) if p.integer and v is not None else v
            validate_config(set_path(tree, tuple(dotted.split(".")), v), {**prov,
                            tuple(dotted.split(".")): where}, str(path))
    validate_config(tree, prov, str(path))
    return space, tree, prov, doc


def _score(run_dir: Path, obj: Objective) -> float:
    """The trial's objective; RuntimeError (a failed trial, the search goes on) when the run
    left nothing to score."""
    try:
        text = (run_dir / "metrics.jsonl").read_text()
    except OSError:
        raise RuntimeError(f"{run_dir}: no metrics.jsonl to score") from None
    vals = []
    for line in text.splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if row.get(obj.metric) is not None:
            vals.append(float(row[obj.metric]))
    if not vals:
        raise RuntimeError(f"{run_dir}: no '{obj.metric}' in metrics.jsonl")
    if obj.reduce == "max":
        return max(vals)
    if obj.reduce == "mean_last_3":
        return sum(vals[-3:]) / len(vals[-3:])
    return vals[-1]


def tune(path: Path, results: Path, *, n_trials: Optional[int] = None, entry: str = "trainer:run",
         show: bool = True) -> dict[str, Any]:
    """Run the missing trials in this process; returns {"best": {...}, "trials": [...]}."""
    import optuna

    from ablate.launch.job import _entry, read_status, stdout_to_stderr

    space, tree, prov, _ = load_space(path)
    out_dir = study_dir_for(results, space.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / "space.yaml", path.read_text())
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=space.name, storage=f"sqlite:///{out_dir / 'optuna.db'}", load_if_exists=True,
        direction=space.objective.direction, sampler=optuna.samplers.TPESampler(seed=space.seed),
    )
    fn = _entry(entry)
    total = n_trials or space.n_trials

    def objective(trial: "optuna.Trial") -> float:
        cfg_tree = set_path(tree, ("seed",), space.seed)
        for dotted, p in space.params.items():
            if p.choices is not None:
                v = trial.suggest_categorical(dotted, p.choices)
            elif p.integer:
                v = trial.suggest_int(dotted, int(p.low), int(p.high), log=p.log)
            else:
                v = trial.suggest_float(dotted, p.low, p.high, log=p.log)
            cfg_tree = set_path(cfg_tree, tuple(dotted.split(".")), v)
        cfg = validate_config(cfg_tree, prov, str(path))
        run_dir = out_dir / run_id_of(cfg.model_dump(mode="json"))
        trial.set_user_attr("run_dir", str(run_dir))
        if read_status(run_dir).get("state") not in ("done", "diverged"):
            fn(cfg, run_dir)  # resumes from the run dir's checkpoint if there is one
        return _score(run_dir, space.objective)

    done = len([t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE])
    if done < total:
        with stdout_to_stderr():
            study.optimize(objective, n_trials=total - done, catch=(RuntimeError,),
                           show_progress_bar=show)
    trials = [{"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
               "run_dir": t.user_attrs.get("run_dir")} for t in study.trials]
    complete = [t for t in trials if t["state"] == "COMPLETE"]
    best = None
    if complete:
        b = study.best_trial
        best = {"number": b.number, "value": b.value, "params": b.params,
                "run_dir": b.user_attrs.get("run_dir")}
    return {"name": space.name, "best": best, "trials": trials, "dir": str(out_dir)}
