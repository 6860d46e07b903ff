"""A stand-in trainer entry for the `sweep --wait` view tests: counts steps like the trainer
(status.json + metrics.jsonl through trainer.rundir) and fails the ppo variant at step 3."""

from __future__ import annotations

import time
from pathlib import Path


def run(config, run_dir: Path) -> None:
    from trainer import rundir

    run_dir = Path(run_dir)
    total = config.budget.steps
    for step in range(1, total + 1):
        time.sleep(0.4)
        if config.loss.type == "ppo" and step == 3:
            raise RuntimeError("boom at step 3")
        rundir.write_status(run_dir, "running", step, total_steps=total)
        rundir.append_metrics(run_dir, {"step": step, "gpu_hours": step / 100,
                                        "eval/pass_rate": 0.1 * step})
    rundir.write_status(run_dir, "done", total, total_steps=total)
