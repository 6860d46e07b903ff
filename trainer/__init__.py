"""The shared RL trainer every ablate job runs: `trainer.run(config, run_dir)`.

Importing `trainer` (or `trainer.config`) does not import torch; `run` loads the loop lazily.
This package never imports `ablate`.
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
