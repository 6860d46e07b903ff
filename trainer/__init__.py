"""The shared RL trainer every ablate job runs: `trainer.run(config, run_dir)`.

Importing `trainer` (or `trainer.config`) does not import torch; `run` loads the loop lazily.
This package never imports `ablate`. Its parts import downward (docs/ARCHITECTURE.md, "Inside
trainer/"); each folder's __init__.py lists its modules:

    loop/          the run: the loop, top to bottom, and the state a checkpoint saves
    algo/          the RL maths, one registry per recipe axis
    generation/    where a step's batch comes from, and the generation service (hf, vLLM)
    models/        the policy model, nothing that samples
    dist/          the job around the processes: process group, devices, abort, stop signals
    plan/          torch-free planning: topology, memory, time
    config.py      TrainConfig, assembled from config_parts/ (one module per YAML area)
    registry.py    the table every axis registers in; torch_axes.py: the registries of the
                   axes whose implementations import torch (engine, off_policy, rollout)
    validate.py    cross-field rules, shared by start-up and `ablate sweep --dry-run`
    engine.py      optimizer engines (torch); engine_deepspeed.py: ZeRO 0-3
    policy.py      the policy a run starts from (HF model or the CPU proxy); warmup.py: the
                   proxy's supervised warm-up
    tasks.py       tasks and `score`, a completion's verdict; evaluate.py: pass rate (mean@k)
    rollouts.py    Generation, Rollout, the Generator protocol: what every backend returns
    rundir.py      a run dir's files, their one owner; trackers.py: TensorBoard, W&B, MLflow
    counted.py     `1 engine`, `2 engines`: a count with its noun agreed, in plans and messages
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainer.config import TrainConfig


def run(config: "TrainConfig", run_dir: Path) -> None:
    """Train (or resume, if `run_dir` has a checkpoint) one run; see trainer/loop/train.py."""
    from trainer.loop.train import run as _run
    from trainer.validate import local_shape, validate

    # Before any process group, model or file: a combination the trainer cannot run fails
    # here with the same one line `ablate sweep --dry-run` gives (trainer/validate.py).
    validate(config, local_shape())
    _run(config, Path(run_dir))


__all__ = ["run"]
