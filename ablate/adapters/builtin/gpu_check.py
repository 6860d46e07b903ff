"""Whether a built-in run needs GPUs: its training step's lower bound on a job's CPU cores
against the job's time limit (ablate/studies/gpu_need.py says why and where the rule applies;
this is the trainer's half, the adapter's `gpu_reason`).

The bound: train_flops (trainer/plan/time_plan.py, 8N FLOPs a token with activation
checkpointing, 6N without, plus attention) over the cores at CPU_TRAIN_FLOPS each (the plan's
measured CPU rate). `engine.device: cpu` is always runnable (the user chose it), and a model
whose shape is not known here is not judged.
"""

from __future__ import annotations

from typing import Optional

from ablate.number_text import count
from trainer.config import TrainConfig
from trainer.plan.model_shape import model_shape
from trainer.plan.time_plan import CPU_TRAIN_FLOPS, dur, lengths, train_flops, trained_tokens


def cpu_step_s(c: TrainConfig, cores: int) -> Optional[float]:
    """Seconds one step's training takes at least on `cores` CPU cores (None: shape unknown)."""
    m, _ = model_shape(c.model.name_or_path)
    if m is None:
        return None
    prompt, completion = lengths(c)
    flops = train_flops(c, m, trained_tokens(c), (prompt + completion) / 2)
    return flops / (max(1, cores) * CPU_TRAIN_FLOPS)


def gpu_reason(c: TrainConfig, cores: int, time_min: float) -> Optional[str]:
    """Why a run of `c` needs GPUs on jobs of `cores` CPU cores and `time_min` minutes (None:
    it can run on their CPUs)."""
    if c.engine.device == "cpu" or c.model.name_or_path is None:
        return None
    step = cpu_step_s(c, cores)
    if step is None or step <= time_min * 60:
        return None
    m, _ = model_shape(c.model.name_or_path)
    return (f"{c.model.name_or_path}, {m.params / 1e9:.1f}B params: one step's training alone "
            f"takes ~{_long(step)} on the job's {count(cores, 'CPU core')} at the time plan's CPU "
            f"rate, longer than its {time_min}-min job")


def _long(seconds: float) -> str:
    """Durations past hours read in days or months (a CPU step of an 8B run is months)."""
    days = seconds / 86400
    if days >= 60:
        return f"{days / 30.44:,.0f} months"
    return f"{days:,.1f} days" if days >= 2 else dur(seconds)
