"""The forecast band beside the score, in the dashboards a run logs to (issues 33, 39 and 41).

After `ablate watch` judges one of our runs (a run dir), it draws the band each evaluation was
held to (`Judgement.points`: the forecast in force at that evaluation, the band its verdict
used) as three series beside the score, `<y>_forecast_lo`, `_median` and `_hi`
(ablate/readers/common.band_names), at the step of that evaluation, in every tracker the run
logs to. Where the run logs is what the trainer recorded when it opened its trackers (the run
dir's trackers.json, read through trainer/rundir.py), not this process's environment:

    tensorboard  an event file of its own in the run's TensorBoard dir
                 (`events.out.tfevents.*.ablate-watch`, this module's alone), written whole at
                 each look and the one before it deleted: TensorBoard shows the series in the
                 run, beside the score, and a band that changed (a renewal) is redrawn
    mlflow       the run's own MLflow run (by its id; MLflow takes metrics from any client, at
                 any step, also while the trainer logs and after it ended): a step's band is
                 sent when it is new or changed (the run's metric history is read first), so a
                 look that finds nothing new sends nothing
    wandb        not written: a W&B run takes one writer at a time (the trainer holds it while
                 it trains) and steps only in increasing order; the band is in TensorBoard,
                 MLflow and watch.json, and `ablate watch --plot` draws it

The trainer reads none of this: it records where it logs, and that is all (issue 39). A tracker
that cannot be written (its package missing, its store gone) is one line on stderr; the watch
goes on.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

from ablate.readers.common import band_names
from trainer import rundir

SUFFIX = ".ablate-watch"  # the event files of the band: this module's, in the run's TB dir
NOT_WRITTEN = {"wandb": "a W&B run takes one writer at a time and steps only in increasing "
                        "order; the band is in TensorBoard, MLflow and watch.json"}
Series = list[tuple[int, dict[str, float]]]


def band_series(run_dir: Path, j: Any, x: str, y: str) -> Series:
    """(step, {name: value}) of each evaluation held to a forecast, in step order: the band's
    low edge, median and high edge there. The step is the metrics row's whose compute (x) and
    score (y) are the evaluation's."""
    steps: dict[float, int] = {}
    for row in rundir.read_metrics(run_dir):
        c, s = row.get(x), row.get(y)
        if isinstance(c, (int, float)) and isinstance(s, (int, float)) and rundir.STEP in row:
            steps[float(c)] = int(row[rundir.STEP])
    lo, mid, hi = band_names(y)
    out = []
    for p in j.points:
        step = steps.get(float(p.compute))
        if step is None or not all(math.isfinite(v) for v in (p.lo, p.mid, p.hi)):
            continue  # past the band's grid (not judged), or no row of it (a torn last line)
        out.append((step, {lo: float(p.lo), mid: float(p.mid), hi: float(p.hi)}))
    return sorted(out, key=lambda sv: sv[0])


def publish(run_dir: Path, j: Any, x: str, y: str) -> list[str]:
    """Draw run `run_dir`'s band in its trackers; returns the lines to say on stderr (a
    tracker that could not be written, and why)."""
    where = rundir.read_trackers(run_dir)
    if not where or j.forecast is None:
        return []
    series = band_series(run_dir, j, x, y)
    said = []
    for name, spec in where.items():
        write = WRITERS.get(name)
        if write is None:
            if name in NOT_WRITTEN:
                continue  # said once in docs/watch.md, not at every look
            said.append(f"{j.run}: forecast band not drawn in {name} (unknown tracker)")
            continue
        try:
            write(spec, series)
        except Exception as e:  # noqa: BLE001 - a dashboard must not stop the watch
            hint = (" (pip install 'ablate[trackers]')" if isinstance(e, ImportError) else "")
            said.append(f"warning: {j.run}: forecast band not drawn in {name}: "
                        f"{type(e).__name__}: {e}{hint}")
    return said


def to_tensorboard(spec: dict, series: Series) -> None:
    """The band as this module's own event file in the run's TensorBoard dir, replacing the
    one written before (a dir the trainer has not created yet: nothing to draw beside)."""
    from tensorboard.compat.proto import event_pb2, summary_pb2
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    d = Path(spec["dir"])
    if not d.is_dir() or not series:
        return
    old = sorted(d.glob(f"*{SUFFIX}"))
    w = EventFileWriter(str(d), filename_suffix=SUFFIX)
    now = time.time()
    for step, values in series:
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=k, simple_value=v)
                                             for k, v in values.items()])
        w.add_event(event_pb2.Event(wall_time=now, step=step, summary=summary))
    w.close()
    new = set(d.glob(f"*{SUFFIX}")) - set(old)
    for f in old if new else []:  # the new file is complete: the old one goes
        f.unlink(missing_ok=True)


def to_mlflow(spec: dict, series: Series) -> None:
    """The band's new or changed steps, logged to the run's MLflow run."""
    uri = str(spec["tracking_uri"])
    if uri.startswith("file:"):  # MLflow 3 opens its file store only when asked (as the trainer)
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    import warnings

    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        client = MlflowClient(tracking_uri=uri)
        run_id = str(spec["run_id"])
        names = {k for _, values in series for k in values}
        have = {k: {m.step: m.value for m in client.get_metric_history(run_id, k)}
                for k in names}
        now = int(time.time() * 1000)
        new = [Metric(k, v, now, step) for step, values in series for k, v in values.items()
               if not math.isclose(have[k].get(step, math.nan), v, rel_tol=1e-9, abs_tol=1e-12)]
        for i in range(0, len(new), 1000):  # log_batch takes at most 1,000 metrics
            client.log_batch(run_id, metrics=new[i:i + 1000])


WRITERS = {"tensorboard": to_tensorboard, "mlflow": to_mlflow}
