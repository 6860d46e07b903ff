"""A built-in run not started, re-planned on the rates its study's started runs measured
(rates.json; ablate/studies/measured.py says which runs' rates it takes): its time plan on the
calibrated speeds, lengths, job start and refill, and `generation_gpus: auto` re-chosen on them.
The adapter's `replan`; its `time_range` is the plan's range before anything has measured.
"""

from __future__ import annotations

from typing import Any, Optional

from trainer.config import TrainConfig
from trainer.plan.rates import calibration
from trainer.plan.split_choice import choose_split, with_split
from trainer.plan.time_plan import completion_cap, plan_time


def replan(c: TrainConfig, shape: Any, limits: Any, docs: list[dict], same_variant: bool,
           configs: list) -> Optional[tuple[Any, str, str]]:
    """(time plan, where its calibration came from, the auto split's change in words or "")
    on the rates `docs` measured (`configs`: their runs' configs, None where not known); None
    where they calibrate nothing."""
    a = calibration(docs, completion_cap(c), same_variant=same_variant, configs=configs)
    if a is None:
        return None
    split = ""
    auto = c.rollout.backend == "vllm" and c.rollout.vllm.generation_gpus == "auto"
    if auto and shape.gpus_per_node:
        before = choose_split(c, shape).generation_gpus
        after = choose_split(c, shape, a=a).generation_gpus
        if after is not None and after != before:
            g = shape.gpus_per_node
            split = (f"auto split re-chosen on the measured rates: {before}/{g - before}"
                     f" -> {after}/{g - after} (generate/train)")
            c = with_split(c, after)
    return plan_time(c, shape, limits, a), a.source, split
