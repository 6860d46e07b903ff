"""Experiment trackers: the metrics lines also go to TensorBoard, W&B and/or MLflow.

metrics.jsonl stays the truth (the fits read it); trackers are for people watching runs in the
tools they already use. Chosen in the recipe with `logging.backends: [tensorboard, wandb,
mlflow]`. Each backend is imported only when it is used (wandb and mlflow are optional extras),
and a backend that fails to open or to log is switched off with one warning on stderr: a
tracker never stops a run.

Names: a run handed an identity by its launcher (the run dir's identity.json, written by the
study store: trainer.rundir) is logged as its variant name, grouped by the study name (W&B
group, MLflow experiment, TensorBoard folder <dir>/tensorboard/<variant>/seed<N> with <dir> the
run dir's parent, which `ablate fit` reads back). A lone run (`ablate run --out DIR`) is named
after its folder. The trainer reads nothing of the orchestrator's own files.

Where each backend logs the run is recorded in the run dir's trackers.json when they open
(trainer.rundir.write_trackers: a TensorBoard dir, an MLflow tracking URI and run id, a W&B
project, id, dir and mode), so the forecast band of `ablate watch` reaches the same dashboards
from `ablate watch`'s side (ablate/analysis/watch_trackers.py) without this process's
environment: the trainer reads nothing the orchestrator writes.

Resume: TensorBoard drops older events at or past the first step logged again (purge_step);
W&B resumes the run with the same id; MLflow reopens the run tagged with the same run id.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

from trainer.rundir import STEP, read_identity, read_status, write_trackers

if TYPE_CHECKING:  # types only: the config reads BACKENDS for the names `logging.backends` takes
    from trainer.config import TrainConfig


@dataclass(frozen=True)
class Identity:
    """Who a run is, for the trackers."""

    run_id: str
    name: str  # the variant name (shared by its seeds)
    seed: int
    study: str  # W&B group / MLflow experiment
    root: Path  # where tracker files go by default


def identify(config: TrainConfig, run_dir: Path) -> Identity:
    """Variant name and study from the identity the launcher handed the run, else the folder."""
    run_dir = Path(run_dir).resolve()
    parent = run_dir.parent
    given = read_identity(run_dir)
    try:
        ident = Identity(run_dir.name, str(given["variant"]), int(given.get("seed", config.seed)),
                         str(given["study"]), parent)
    except (KeyError, TypeError, ValueError):  # no identity.json (a lone run), or a bad one
        ident = Identity(run_dir.name, run_dir.name, config.seed, parent.name or "ablate", run_dir)
    if config.logging.dir:
        ident = Identity(ident.run_id, ident.name, ident.seed, ident.study, Path(config.logging.dir))
    return ident


def numeric_items(row: dict[str, Any]) -> dict[str, float]:
    """The row's numbers (bools as 0/1), without the step itself; strings/None are skipped."""
    out = {}
    for k, v in row.items():
        if k == STEP or v is None or isinstance(v, str):
            continue
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            continue
    return out


class Backend(Protocol):
    where: dict[str, Any]  # what trackers.json records of it (JSON)

    def log(self, step: int, values: dict[str, float]) -> None: ...

    def close(self, state: str) -> None: ...


class TensorBoardBackend:
    """Event files under <root>/tensorboard/<variant>/seed<N> (torch's SummaryWriter)."""

    def __init__(self, config: TrainConfig, ident: Identity) -> None:
        self.dir = ident.root / "tensorboard" / _safe(ident.name) / f"seed{ident.seed}"
        self.config, self.writer = config, None
        self.where = {"dir": str(self.dir.resolve())}

    def log(self, step: int, values: dict[str, float]) -> None:
        if self.writer is None:  # opened at the first row: purge what a killed attempt left
            from torch.utils.tensorboard import SummaryWriter

            self.dir.mkdir(parents=True, exist_ok=True)
            self.writer = SummaryWriter(str(self.dir), purge_step=step)
        for k, v in values.items():
            self.writer.add_scalar(k, v, step)
        self.writer.flush()

    def close(self, state: str) -> None:
        if self.writer is not None:
            self.writer.close()


class WandbBackend:
    """A W&B run: id = run id (resumable), name = variant, group = study; offline by default."""

    def __init__(self, config: TrainConfig, ident: Identity) -> None:
        import wandb

        lc = config.logging
        mode = lc.wandb_mode or os.environ.get("WANDB_MODE") or "offline"
        ident.root.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=lc.project, group=ident.study, name=ident.name, id=ident.run_id,
            resume="allow", dir=str(ident.root), mode=mode, job_type="train",
            config={**config.model_dump(mode="json"), "run_id": ident.run_id},
            reinit="create_new",
            settings=wandb.Settings(console="off", quiet=True, x_disable_stats=True))
        self.where = {"project": lc.project, "entity": getattr(self.run, "entity", None),
                      "group": ident.study, "name": ident.name, "id": ident.run_id,
                      "dir": str(ident.root.resolve()), "mode": mode}

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log(values, step=step)

    def close(self, state: str) -> None:
        self.run.finish(exit_code=0 if state == "done" else 1)


class MlflowBackend:
    """An MLflow run in experiment = study, run name = variant, tagged with the run id."""

    _STATUS = {"done": "FINISHED", "failed": "FAILED", "diverged": "FAILED"}

    def __init__(self, config: TrainConfig, ident: Identity) -> None:
        import warnings

        from mlflow.tracking import MlflowClient

        uri = config.logging.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") \
            or (ident.root / "mlruns").resolve().as_uri()
        if uri.startswith("file:") or "://" not in uri:
            # MLflow 3 refuses its file store unless asked for: a plain folder of text files
            # (mlruns/<experiment>/<run>/metrics/<key>) is what a run on a cluster can write.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        with warnings.catch_warnings():  # MLflow 3 warns that file stores are old-fashioned
            warnings.simplefilter("ignore")
            self.client = MlflowClient(tracking_uri=uri)
            exp = self.client.get_experiment_by_name(ident.study)
            exp_id = exp.experiment_id if exp else self.client.create_experiment(ident.study)
            found = self.client.search_runs([exp_id], f"tags.`ablate.run_id` = '{ident.run_id}'",
                                            max_results=1)
            if found:
                self.run_id = found[0].info.run_id
                self.client.update_run(self.run_id, status="RUNNING")
            else:
                run = self.client.create_run(exp_id, run_name=ident.name, tags={
                    "ablate.run_id": ident.run_id, "ablate.seed": str(ident.seed),
                    "ablate.study": ident.study})
                self.run_id = run.info.run_id
                from mlflow.entities import Param

                params = [Param(k, str(v)[:6000]) for k, v in _flatten(
                    config.model_dump(mode="json")).items()]
                for i in range(0, len(params), 100):  # log_batch takes at most 100 params
                    self.client.log_batch(self.run_id, params=params[i:i + 100])
        where = uri if "://" in uri else Path(uri).resolve().as_uri()  # not this cwd's
        self.where = {"tracking_uri": where, "run_id": self.run_id, "experiment": ident.study}

    def log(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step)
                                                    for k, v in values.items()])

    def close(self, state: str) -> None:
        self.client.set_terminated(self.run_id, status=self._STATUS.get(state, "KILLED"))


BACKENDS: dict[str, Callable[[TrainConfig, Identity], Backend]] = {
    "tensorboard": TensorBoardBackend, "wandb": WandbBackend, "mlflow": MlflowBackend}


class Trackers:
    """The run's open backends; any exception switches that backend off (one warning)."""

    def __init__(self, config: TrainConfig, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.ident = identify(config, run_dir)
        self.backends: dict[str, Backend] = {}
        self.errors: dict[str, str] = {}
        for name in dict.fromkeys(config.logging.backends):
            try:
                self.backends[name] = BACKENDS[name](config, self.ident)
            except Exception as e:  # noqa: BLE001 - an optional tracker must not kill the run
                self._fail(name, "could not start", e)
        if self.backends:  # where they log, for `ablate watch`'s band (trainer.rundir)
            try:
                write_trackers(self.run_dir, {n: b.where for n, b in self.backends.items()})
            except OSError as e:
                print(f"warning: could not record the trackers of run {self.ident.run_id}: "
                      f"{e}", file=sys.stderr, flush=True)

    def _fail(self, name: str, what: str, e: BaseException) -> None:
        self.backends.pop(name, None)
        self.errors[name] = f"{type(e).__name__}: {e}"
        hint = " (pip install 'ablate[trackers]')" if isinstance(e, ImportError) else ""
        print(f"warning: tracker {name} {what}, switched off for run {self.ident.run_id}: "
              f"{self.errors[name]}{hint}", file=sys.stderr, flush=True)

    def log(self, row: dict[str, Any]) -> None:
        step, values = int(row[STEP]), numeric_items(row)
        for name, b in list(self.backends.items()):
            try:
                b.log(step, values)
            except Exception as e:  # noqa: BLE001
                self._fail(name, "failed to log", e)

    def close(self) -> None:
        state = _state(self.run_dir)
        for name, b in list(self.backends.items()):
            try:
                b.close(state)
            except Exception as e:  # noqa: BLE001
                self._fail(name, "failed to close", e)
        self.backends = {}


_active: Optional[Trackers] = None


def log_metrics(config: TrainConfig, run_dir: Path, row: dict[str, Any]) -> None:
    """Send one metrics line to the run's trackers (opened on first use, per run dir; a job
    training several runs in one process closes the previous run's trackers first)."""
    global _active
    if not config.logging.backends:
        return
    if _active is None or _active.run_dir != Path(run_dir):
        close()
        _active = Trackers(config, run_dir)
    _active.log(row)


def close() -> None:
    """Finish the open run's trackers with the state in its status.json (also at exit)."""
    global _active
    if _active is not None:
        t, _active = _active, None
        t.close()


atexit.register(close)


def _state(run_dir: Path) -> str:
    status = read_status(Path(run_dir))
    return str(status.get("state", "")) if isinstance(status, dict) else ""


def _safe(name: str) -> str:
    """A variant name as one folder name (names may hold '/' from JSON values)."""
    return name.replace(os.sep, "_") or "_"


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out
