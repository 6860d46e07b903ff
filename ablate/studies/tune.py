"""`ablate tune`: Optuna search over recipe knobs, each trial a real trainer run.

A search space (sweeps/tune_*.yaml) names a base recipe, fixed overrides, and per dotted
TrainConfig path either a numeric range or a list of choices. Trials are stored in an Optuna
SQLite file in the results dir, and each trial's run dir is named by the config hash like a
study's, so an interrupted `ablate tune` picks up where it stopped and never trains the same
config twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from ablate.errors import InputError
from ablate.studies.entry import TRAINER_ENTRY
from ablate.studies.expand import run_id_of
from ablate.studydir import study_dir_for
from ablate.adapters.builtin import (BudgetConfig, Provenance, check_config_path, resolve_base,
                                     set_path, validate_config)
from ablate.studies.schema import NAME_RE as _NAME_RE
from ablate.validation import Strict, load_model, suggest
from ablate.yamlio import YamlDoc
from trainer import rundir
from trainer.rundir import COMPUTE_COLUMNS, SCORE_COLUMNS, SECTIONS, atomic_write


class Param(Strict):
    """A numeric range (low/high, optionally log) or a list of choices."""

    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = Field(False, description="Sample integers in [low, high].")
    choices: list[bool | int | float | str | None] | None = None

    @model_validator(mode="after")
    def _shape(self) -> Param:
        if self.choices is not None:
            if not self.choices or self.low is not None or self.high is not None:
                raise ValueError("give either non-empty `choices` or `low`/`high`, not both")
        elif self.low is None or self.high is None or not self.low < self.high:
            raise ValueError("a range needs low < high (or use `choices`)")
        elif self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        return self


FITTED = ("asymptote", "predicted")
# metrics.jsonl columns (trainer.rundir declares them): the run dir's contract plus the
# trainer's sections (train/..., data/...).
METRIC_PREFIXES = SECTIONS


class Objective(Strict):
    metric: str = Field(rundir.PASS_RATE, description="Column of metrics.jsonl.")
    reduce: Literal["last", "max", "mean_last_3", "asymptote", "predicted"] = Field(
        "last", description="Over eval points (last/max/mean_last_3), or on the fitted ScaleRL "
        "curve: asymptote = fitted A, predicted = fitted score at compute `at`.")
    direction: Literal["maximize", "minimize"] = "maximize"
    x: str = Field(rundir.GPU_HOURS, description="Fitted objectives: the compute column.")
    at: float | None = Field(None, gt=0, description="reduce: predicted: compute (in `x` "
                                "units) at which the fitted score is the objective.")
    min_compute: float | None = Field(None, ge=0, description="Fitted objectives: start of "
                                         "the fit window (default: read from the curve's shape).")


class Prune(Strict):
    rungs: list[BudgetConfig] = Field(min_length=1, description="Budgets at which each trial's "
                                      "curve so far is fitted; it stops when its A's upper "
                                      "bound is below the best finished trial's A lower bound.")
    stop_departed: bool = Field(False, description="true = also stop, at a rung, a trial that "
                                "has departed from its frozen forecast (`ablate watch`'s rule).")


class TuneSpace(Strict):
    name: str = Field(description="Results go to <results>/<name>/ (optuna.db + run dirs).")
    base: str | None = Field(None, description="Recipe YAML, relative to this file.")
    overrides: dict[str, Any] = Field(default_factory=dict, description="Fixed changes to the base.")
    params: dict[str, Param] = Field(min_length=1, description="Dotted TrainConfig path -> range.")
    objective: Objective = Field(default_factory=Objective)
    n_trials: int = Field(10, ge=1, description="Total trials (a rerun only adds the missing ones).")
    seed: int = Field(0, description="Seed of the sampler and of every trial's run.")
    budget: BudgetConfig | None = Field(None, description="Replaces TrainConfig.budget.")
    prune: Prune | None = Field(None, description="Curve-predictive pruning (needs reduce "
                                   "asymptote or predicted, and `budget`).")


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
    _check_objective(space, doc)
    return space, tree, prov, doc


def _known_metric(name: str) -> bool:
    return name in (*COMPUTE_COLUMNS, *SCORE_COLUMNS) or name.startswith(METRIC_PREFIXES)


def _check_objective(space: TuneSpace, doc: YamlDoc) -> None:
    """Objective and pruning settings that cannot work, refused before any trial trains."""
    from ablate.studies.stagespec import limit_of

    obj = space.objective
    at = lambda *k: doc.where(("objective", *k)) if "objective" in doc.data else str(doc.path)
    if obj.reduce in FITTED:
        if obj.metric not in SCORE_COLUMNS:
            raise InputError(f"{at('metric')}: objective.metric '{obj.metric}' cannot be fitted "
                             f"with reduce {obj.reduce} {suggest(obj.metric, list(SCORE_COLUMNS))}"
                             "; the sigmoid fits a pass rate in [0, 1]")
        if obj.x not in COMPUTE_COLUMNS:
            raise InputError(f"{at('x')}: objective.x '{obj.x}' is not a compute column "
                             f"{suggest(obj.x, list(COMPUTE_COLUMNS))}")
        if obj.direction != "maximize":
            raise InputError(f"{at('direction')}: reduce {obj.reduce} needs direction maximize "
                             "(a higher fitted score is better)")
        if (obj.reduce == "predicted") != (obj.at is not None):
            raise InputError(f"{at('reduce')}: reduce predicted needs `at` (the compute to "
                             "predict at) and `at` is only used by reduce predicted")
    else:
        if not _known_metric(obj.metric):
            raise InputError(f"{at('metric')}: objective.metric '{obj.metric}' is not a "
                             "metrics.jsonl column "
                             f"{suggest(obj.metric, [*SCORE_COLUMNS, *COMPUTE_COLUMNS])}")
        if obj.at is not None:
            raise InputError(f"{at('at')}: `at` is only used by reduce predicted")
    if space.prune is not None:
        where = doc.where(("prune",))
        if obj.reduce not in FITTED:
            raise InputError(f"{where}: prune compares fitted asymptotes: set objective.reduce "
                             f"to asymptote or predicted (is {obj.reduce})")
        if space.budget is None:
            raise InputError(f"{where}: prune needs the space's `budget` (the last rung)")
        try:
            kind, final = limit_of(space.budget)
            vals = [limit_of(b) for b in space.prune.rungs]
        except ValueError as e:
            raise InputError(f"{where}: {e}") from None
        if any(k != kind for k, _ in vals) or any(b <= a for (_, a), (_, b) in zip(vals, vals[1:])) \
                or vals[-1][1] >= final:
            raise InputError(f"{where}: prune.rungs must be increasing {kind} budgets below the "
                             f"final budget {{{kind}: {final:g}}}")


def _fit(run_dir: Path, obj: Objective):
    """The trial's curve so far, fitted (FitError when it cannot be)."""
    return _fit_points(*_points(run_dir, obj), obj)


def _fit_points(c: list[float], y: list[float], obj: Objective):
    from ablate.analysis.fitters import fit_sigmoid

    return fit_sigmoid(c, y, min_compute=obj.min_compute, n_boot=400)


def _rows(run_dir: Path, error: type[Exception], what: str) -> list[dict]:
    """The trial's metrics rows (trainer.rundir's one reader and torn-line rule); `error`
    when the run wrote none or a line is damaged."""
    if not (run_dir / rundir.METRICS).is_file():
        raise error(f"{run_dir}: no {rundir.METRICS}{what}")
    try:
        return rundir.read_metrics(run_dir)
    except rundir.MetricsError as e:
        raise error(str(e)) from None


def _points(run_dir: Path, obj: Objective) -> tuple[list[float], list[float]]:
    """(compute, score) of every evaluation the trial logged (FitError when there is none)."""
    from ablate.analysis.fit import FitError

    rows = [(float(r[obj.x]), float(r[obj.metric])) for r in _rows(run_dir, FitError, "")
            if r.get(obj.metric) is not None and r.get(obj.x) is not None]
    if not rows:
        raise FitError(f"{run_dir}: no '{obj.metric}' with '{obj.x}' in {rundir.METRICS}")
    c, y = zip(*rows)
    return list(c), list(y)


def _fitted_score(run_dir: Path, obj: Objective, trial: Any) -> float:
    """Fitted A (or the fitted score at `at`), intervals stored on the trial; RuntimeError (a
    failed trial) when the curve cannot be fitted. The fitter's InputError (say a metric
    outside [0, 1]) is one trial's bad data, not bad input to `ablate tune`: the search goes
    on instead of exiting 2."""
    try:
        fit = _fit(run_dir, obj)
    except InputError as e:  # FitError is an InputError
        raise RuntimeError(f"{run_dir}: {e}") from None
    trial.set_user_attr("A", fit.A)
    trial.set_user_attr("A_ci", list(fit.ci.get("A", (fit.A, fit.A))))
    if obj.reduce == "asymptote":
        return fit.A
    trial.set_user_attr("predicted_ci", list(fit.predict_interval(obj.at)))
    return float(fit.predict(obj.at))


def _score(run_dir: Path, obj: Objective) -> float:
    """The trial's objective; RuntimeError (a failed trial, the search goes on) when the run
    left nothing to score."""
    vals = [float(r[obj.metric]) for r in _rows(run_dir, RuntimeError, " to score")
            if r.get(obj.metric) is not None]
    if not vals:
        raise RuntimeError(f"{run_dir}: no '{obj.metric}' in {rundir.METRICS}")
    if obj.reduce == "max":
        return max(vals)
    if obj.reduce == "mean_last_3":
        return sum(vals[-3:]) / len(vals[-3:])
    return vals[-1]


def _trained_to(run_dir: Path, budget: dict[str, Any]) -> bool:
    """The run finished (done) with a config that reaches `budget`."""
    from ablate.studies.adaptive import reaches as _reaches, run_budget as _run_budget

    return rundir.read_state(run_dir) == rundir.RunState.DONE and \
        _reaches(_run_budget(run_dir), budget)


def _suggest_config(trial: Any, space: TuneSpace, tree: dict[str, Any], prov: Provenance,
                    path: Path):
    """The trial's TrainConfig: the base with the sampler's value for every param."""
    cfg_tree = set_path(tree, ("seed",), space.seed)
    for dotted, p in space.params.items():
        if p.choices is not None:
            v = trial.suggest_categorical(dotted, p.choices)
        elif p.integer:
            v = trial.suggest_int(dotted, int(p.low), int(p.high), log=p.log)
        else:
            v = trial.suggest_float(dotted, p.low, p.high, log=p.log)
        cfg_tree = set_path(cfg_tree, tuple(dotted.split(".")), v)
    return validate_config(cfg_tree, prov, str(path))


def _judge_rung(trial: Any, i: int, budget: dict[str, Any], run_dir: Path, obj: Objective,
                stop_departed: bool = False) -> None:
    """Fit the trial's curve at rung `i` and report it to the pruner; optuna.TrialPruned when
    its A's upper bound is below the best finished trial's lower bound or, with no fit, when
    its score collapsed (ablate.studies.pruner)."""
    import optuna

    from ablate.analysis.fit import FitError
    from ablate.studies.stage_rules import run_level

    try:
        c, y = _points(run_dir, obj)
    except FitError:
        c, y = [], []
    if stop_departed and c:  # opt in (prune.stop_departed): off its own frozen forecast
        from ablate.analysis.watch import judge

        j = judge(run_dir.name, run_dir.name, 0, c, y, with_today=False)
        if j.verdict == "departed":
            trial.set_user_attr("pruned_at", budget)
            raise optuna.TrialPruned(j.reason)
    try:
        fit = _fit_points(c, y, obj)
    except Exception:  # noqa: BLE001 - no fit: only a collapse can stop it (pruner.py)
        level = run_level(y)
        fell = list(level) if level is not None else None
        trial.set_user_attr("rung_A_ci", None)
        trial.set_user_attr("rung_fell", fell)
        if fell is not None:
            trial.report(fell[1], i)
            if trial.should_prune():
                trial.set_user_attr("pruned_at", budget)
                raise optuna.TrialPruned(f"score fell from {fell[0]:.3f} to "
                                         f"{fell[1]:.3f} (collapsed)") from None
        return
    trial.set_user_attr("rung_A_ci", list(fit.ci.get("A", (fit.A, fit.A))))
    trial.set_user_attr("rung_fell", None)
    trial.report(fit.A, i)
    if trial.should_prune():
        trial.set_user_attr("pruned_at", budget)
        raise optuna.TrialPruned(f"A upper bound {fit.ci['A'][1]:.3f} below the best "
                                 "finished trial's lower bound")


def tune(path: Path, results: Path, *, n_trials: int | None = None, entry: str = TRAINER_ENTRY,
         show: bool = True) -> dict[str, Any]:
    """Run the missing trials in this process; returns {"best": {...}, "trials": [...]}."""
    import optuna

    from ablate.studies.launch.job import load_entry, stdout_to_stderr
    from ablate.studies.pruner import CurvePruner

    space, tree, prov, _ = load_space(path)
    out_dir = study_dir_for(results, space.name)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write(out_dir / "space.yaml", path.read_text())
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=space.name, storage=f"sqlite:///{out_dir / 'optuna.db'}", load_if_exists=True,
        direction=space.objective.direction, sampler=optuna.samplers.TPESampler(seed=space.seed),
        pruner=CurvePruner() if space.prune else optuna.pruners.NopPruner(),
    )
    fn = load_entry(entry)
    total = n_trials or space.n_trials

    def objective(trial: optuna.Trial) -> float:
        cfg = _suggest_config(trial, space, tree, prov, path)
        run_dir = out_dir / run_id_of(cfg.model_dump(mode="json"))
        trial.set_user_attr("run_dir", str(run_dir))
        rungs = [b.model_dump(exclude_none=True) for b in space.prune.rungs] if space.prune else []
        for i, b in enumerate(rungs):  # train to each rung (resuming), fit, maybe stop
            if not _trained_to(run_dir, b):
                fn(cfg.model_copy(update={"budget": BudgetConfig(**b)}), run_dir)
            if rundir.read_state(run_dir) == rundir.RunState.DIVERGED:
                break
            _judge_rung(trial, i, b, run_dir, space.objective, space.prune.stop_departed)
        if not rundir.is_final(rundir.read_state(run_dir)) or (
                rungs and not _trained_to(run_dir, cfg.budget.model_dump(exclude_none=True))):
            fn(cfg, run_dir)  # resumes from the run dir's checkpoint if there is one
        if space.objective.reduce in FITTED:
            return _fitted_score(run_dir, space.objective, trial)
        return _score(run_dir, space.objective)

    done = len([t for t in study.trials if t.state in (optuna.trial.TrialState.COMPLETE,
                                                         optuna.trial.TrialState.PRUNED)])
    if done < total:
        with stdout_to_stderr():
            study.optimize(objective, n_trials=total - done, catch=(RuntimeError,),
                           show_progress_bar=show)
    return _report(study, space, out_dir)


def _report(study: Any, space: TuneSpace, out_dir: Path) -> dict[str, Any]:
    """tune's output: every trial, and the best. Fitted objectives rank the finished trials
    on one fit window for all of them (ablate.studies.tune_ranking, the window `compare`
    uses), the others by the search's own values."""
    from ablate.studies.tune_ranking import rank_on_shared_window

    trials = [{"number": t.number, "state": t.state.name, "value": t.value, "params": t.params,
               "run_dir": t.user_attrs.get("run_dir"), "A_ci": t.user_attrs.get("A_ci"),
               "predicted_ci": t.user_attrs.get("predicted_ci"),
               "pruned_at": t.user_attrs.get("pruned_at")} for t in study.trials]
    window = None
    if space.objective.reduce in FITTED:
        best, window = rank_on_shared_window(trials, space.objective, str(out_dir))
    else:
        complete = [t for t in trials if t["state"] == "COMPLETE"]
        best = next(t for t in trials if t["number"] == study.best_trial.number) \
            if complete else None
    if best is not None:
        best = {k: best.get(k) for k in ("number", "value", "params", "run_dir", "A_ci",
                                         "predicted_ci")}
    out = {"name": space.name, "best": best, "trials": trials, "dir": str(out_dir)}
    if window is not None:
        out["window"] = window
    return out
