"""Trainer trackers: every metrics-line field reaches TensorBoard, W&B (offline) and MLflow
(file store) at its step, under the variant's name and the study's name; the files they write
read back through `ablate fit`'s readers; a failing tracker never stops logging or the run."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import struct
import time

import numpy as np
import pytest

from trainer import rundir, trackers
from trainer.config import TrainConfig

ROWS = [{"step": s, "samples": 64 * s, "gpu_hours": s / 100, "flops": 1e9 * s,
         "eval/pass_rate": 0.2 + s / 200, "data/epoch": 1, "note": "text is skipped"}
        for s in (0, 10, 20, 30)]


def _need(module: str) -> None:
    if importlib.util.find_spec(module) is None:
        msg = f"{module} not installed (pip install 'ablate[trackers]'; tests/run.sh does)"
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)


def _study(tmp_path, backends, **logging):
    root = tmp_path / "results" / "loss_agg"
    (root / "a1b2c3d4e5f6").mkdir(parents=True)
    # the identity the study store hands the run (the trainer reads no variants.json)
    rundir.write_identity(root / "a1b2c3d4e5f6", study="loss_agg",
                          variant="loss.aggregation=prompt", seed=1)
    cfg = TrainConfig.model_validate({"logging": {"backends": backends, **logging}})
    return root, root / "a1b2c3d4e5f6", cfg


def _log_all(cfg, run_dir, state="done"):
    for row in ROWS:
        trackers.log_metrics(cfg, run_dir, row)
    (run_dir / "status.json").write_text(json.dumps({"state": state, "step": 30}))
    trackers.close()


def test_tensorboard_events_read_back_by_ablate_fit(tmp_path):
    from ablate.analysis.sources import load

    root, run, cfg = _study(tmp_path, ["tensorboard"])
    _log_all(cfg, run)
    tb = root / "tensorboard"
    assert (tb / "loss.aggregation=prompt" / "seed1").is_dir()
    # where it logged, recorded for `ablate watch`'s band (trainer.rundir's trackers.json)
    assert rundir.read_trackers(run) == {
        "tensorboard": {"dir": str((tb / "loss.aggregation=prompt" / "seed1").resolve())}}
    cur = load(tb)
    assert cur.variants() == ["loss.aggregation=prompt"] and set(cur.frame["seed"]) == {1}
    assert cur.x == "gpu_hours" and cur.y == "eval/pass_rate"
    np.testing.assert_allclose(cur.frame["score"], [r["eval/pass_rate"] for r in ROWS], rtol=1e-6)
    from tbparse import SummaryReader

    tags = set(SummaryReader(str(tb)).scalars["tag"])
    assert tags == {"samples", "gpu_hours", "flops", "eval/pass_rate", "data/epoch"}


def test_mlflow_file_store_read_back(tmp_path):
    _need("mlflow")
    from ablate.analysis.sources import load

    root, run, cfg = _study(tmp_path, ["mlflow"])
    _log_all(cfg, run)
    metric = glob.glob(str(root / "mlruns" / "*" / "*" / "metrics" / "eval" / "pass_rate"))
    assert len(metric) == 1
    lines = [ln.split() for ln in open(metric[0]).read().splitlines()]
    assert [(float(v), int(s)) for _, v, s in lines] == [(r["eval/pass_rate"], r["step"])
                                                         for r in ROWS]
    cur = load(root / "mlruns")
    assert cur.variants() == ["loss.aggregation=prompt"] and set(cur.frame["seed"]) == {1}
    from mlflow.tracking import MlflowClient

    client = MlflowClient((root / "mlruns").as_uri())
    exp = client.get_experiment_by_name("loss_agg")
    (r,) = client.search_runs([exp.experiment_id])
    assert r.info.run_name == "loss.aggregation=prompt" and r.info.status == "FINISHED"
    assert r.data.tags["ablate.run_id"] == "a1b2c3d4e5f6"
    # a resumed run (new process, same run dir) continues the same MLflow run
    trackers.log_metrics(cfg, run, {"step": 40, "eval/pass_rate": 0.5})
    trackers.close()
    assert len(client.search_runs([exp.experiment_id])) == 1


def _wandb_records(path):
    """Records of a .wandb file (W&B's LevelDB-style log: 7-byte header, 32 KiB blocks of
    chunks with a 7-byte header: crc32, length, type 1=full 2=first 3=middle 4=last)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, buf, out = 7, b"", []
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:
            pos += left
            continue
        _, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if kind == 0:
            pos += left - 7
            continue
        buf += data[pos:pos + n]
        pos += n
        if kind in (1, 4):
            r = pb.Record()
            r.ParseFromString(buf)
            out.append(r)
            buf = b""
    return out


def _finished_records(path, wait_s=60.0):
    """The file's records once W&B has written all of them. `run.finish()` returns when the
    exit is acknowledged, but wandb-core may still hold the file's buffered records until its
    service closes the stream (CI on a loaded 2-core machine read a file holding only the
    header); stopping the service is what the end of a trainer process does."""
    import wandb

    wandb.teardown()
    deadline = time.monotonic() + wait_s
    while True:
        recs = _wandb_records(path)
        if any(r.WhichOneof("record_type") == "exit" for r in recs) \
                or time.monotonic() > deadline:
            return recs
        time.sleep(0.2)


@pytest.mark.slow  # wandb's writer: 1.5-2.3 s of CPU, at the fast tier's limit
def test_wandb_offline_run(tmp_path):
    _need("wandb")
    root, run, cfg = _study(tmp_path, ["wandb"], project="ablate-test")
    _log_all(cfg, run, state="failed")
    (f,) = glob.glob(str(root / "wandb" / "offline-run-*" / "run-a1b2c3d4e5f6.wandb"))
    recs = _finished_records(f)
    (info,) = [r.run for r in recs if r.WhichOneof("record_type") == "run"]
    assert (info.run_id, info.display_name, info.run_group, info.project) == (
        "a1b2c3d4e5f6", "loss.aggregation=prompt", "loss_agg", "ablate-test")
    hist = [{i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            for r in recs if r.WhichOneof("record_type") == "history"]
    assert [h["_step"] for h in hist] == [0, 10, 20, 30]
    assert [h["eval/pass_rate"] for h in hist] == [r["eval/pass_rate"] for r in ROWS]
    assert all(h["data/epoch"] == 1 and "note" not in h for h in hist)
    (ex,) = [r.exit for r in recs if r.WhichOneof("record_type") == "exit"]
    assert ex.exit_code == 1  # the run's state was failed


def test_a_failing_tracker_is_switched_off_and_the_rest_keep_logging(tmp_path, capsys):
    _need("mlflow")
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    root, run, cfg = _study(tmp_path, ["mlflow", "tensorboard"],
                            mlflow_tracking_uri=(blocker / "mlruns").as_uri())
    _log_all(cfg, run)
    err = capsys.readouterr().err
    assert "warning: tracker mlflow could not start, switched off for run a1b2c3d4e5f6" in err
    from ablate.analysis.sources import load

    assert len(load(root / "tensorboard").frame) == len(ROWS)


@pytest.mark.slow  # builds the cached proxy model on first use (~1 min)
def test_trainer_run_logs_to_tensorboard_and_survives_a_broken_tracker(tmp_path):
    """A real (tiny) trainer run: TensorBoard gets every metrics line; an MLflow store that
    cannot be created only warns; the run finishes with its metrics.jsonl intact."""
    _need("mlflow")
    from tests._trainer_util import config, metrics, status, tiny

    import trainer

    blocker = tmp_path / "file"
    blocker.write_text("x")
    d = tiny(logging={"backends": ["tensorboard", "mlflow"],
                      "mlflow_tracking_uri": (blocker / "mlruns").as_uri()})
    run_dir = tmp_path / "lone_run"
    trainer.run(config(d), run_dir)
    assert status(run_dir)["state"] == "done"
    rows = metrics(run_dir)
    from tbparse import SummaryReader

    sc = SummaryReader(str(run_dir / "tensorboard")).scalars
    pr = sc[sc["tag"] == "eval/pass_rate"].sort_values("step")
    assert list(pr["step"]) == [r["step"] for r in rows]
    np.testing.assert_allclose(pr["value"], [r["eval/pass_rate"] for r in rows], rtol=1e-6)
    assert set(sc["tag"]) == {k for k in rows[-1] if k != "step"}
