"""A GPU recipe sent where its jobs get no GPUs is refused, in one line naming a profile that
fits: the one rule `ablate sweep` and `ablate sweep --dry-run` share (`--force` overrides).

Why: without it a Slurm profile with `gpus_per_node: 0` (or no profile at all where `sinfo`
answers: Slurm's defaults, no GPUs) planned the paper recipe with a warning and exit 0, and
`ablate sweep` queued 8B jobs on CPU nodes, each to fail or crawl for days.

Which runs need GPUs. `engine.device: cuda` says so itself (trainer/validate.py refuses it on
a job without GPUs). With `engine.device: auto` (the recipes' default) the trainer would fall
back to CPUs, so the rule asks the time plan how long one step's training alone would take
there (the adapter's `gpu_reason`, ablate/adapters/builtin/gpu_check.py): train_flops
(trainer/plan/time_plan.py, 8N FLOPs a token with activation checkpointing, 6N without, plus
attention) over the job's CPU cores at CPU_TRAIN_FLOPS each (the plan's
measured CPU rate, one thread of this project's 2-core machine; a big node's core may be a few
times faster, which moves no real case across the line: Qwen3-8B at the paper's 768 x 16k
tokens takes ~10 months a step on one such core). A run needs GPUs when that lower bound on one
step is longer than one job (its time limit, `slurm.time_min`): it could never keep a step.
The CPU proxy and tiny test checkpoints (the dress rehearsal's 2-layer Qwen3) stay runnable on
CPUs; `engine.device: cpu` always is (the user chose it). A model whose shape is not known
here is not judged (the dry run's memory-plan warning still says what is not checked).

Where: the executors that size runs in GPU nodes (launch.gpu_nodes, executor.GpuNodes: Slurm),
whose cores, time limit, key names and GPU profile to suggest this module asks for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ablate.number_text import count
from ablate import shipped
from ablate.adapters import adapter_of, memory_plan
from ablate.errors import InputError
from ablate.studies import launch
from ablate.studies.expand import Variant
from ablate.studies.launch.executor import GpuNodes
from ablate.studies.launch.profile import Profile, load_profile
from ablate.adapters.builtin import JobShape


def gpu_reason(c: Any, prof: Profile, sizer: GpuNodes) -> Optional[str]:
    """Why a run of `c` needs GPUs on `prof`'s jobs under `sizer` (None: it can run on their
    CPUs, or its trainer has no such check here): its adapter's `gpu_reason`."""
    adapter = adapter_of(c)
    if adapter.gpu_reason is None:
        return None
    return adapter.gpu_reason(c, sizer.cpu_cores(prof), sizer.limits(prof).time_min)


def check_gpus(study_path: Path | str, variants: list[Variant], prof: Profile, executor: str,
               ref: Optional[str]) -> None:
    """Refuse (InputError, one line) a study with a run that needs GPUs when the jobs of an
    executor that sizes GPU nodes (launch.gpu_nodes) would get none. `ref`: the profile as
    named (None: none, the executor's defaults), for the message."""
    sizer = launch.gpu_nodes(executor)
    if sizer is None or sizer.job_shape(prof).gpus_per_node:
        return
    for v in variants:
        if adapter_of(v.config).time_plan is None:
            continue  # a trainer with no time plan here (another trainer) sizes its own jobs
        why = gpu_reason(v.config, prof, sizer)
        if why is None:
            continue
        gpus = sizer.key("gpus_per_node")
        fit = fitting_profile(Path(study_path).parent, variants, sizer)
        use = (f"use --profile {fit}" if fit else f"use a profile with {gpus} and "
               f"gpu_memory_gib (the shipped sweeps/{sizer.GPU_PROFILE}.yaml is one to copy)")
        label = f"profile {ref}" if ref else f"no launch profile, {sizer.CALLED}'s defaults"
        raise InputError(f"{study_path}: variant {v.name} needs GPUs ({why}), but its "
                         f"{sizer.CALLED} jobs would get none ({label}: {gpus} 0); {use}, "
                         "or --force to submit anyway")


def fitting_profile(study_dir: Path, variants: list[Variant], sizer: GpuNodes) -> Optional[str]:
    """The first profile with GPUs under `sizer` on which the trainer accepts every variant
    and its memory plan fits: `NAME (2 nodes x 8 GPUs of 80 GiB)`, looked for where a bare
    `--profile NAME` is (ablate/studies/launch/profile.py find_profile), in that order, so
    NAME finds it."""
    folders = [study_dir / "sweeps", study_dir.parent / "sweeps", Path.cwd() / "sweeps",
               shipped.shipped_dir("sweeps")]
    seen: set[str] = set()
    for folder in folders:
        for path in sorted(folder.glob("*.yaml")) if folder and folder.is_dir() else []:
            if path.stem in seen:
                continue  # the bare name finds the earlier file
            seen.add(path.stem)
            try:
                prof = load_profile(path)
            except InputError:
                continue  # a search space for `ablate tune`, or a broken file
            shape = sizer.job_shape(prof)
            if shape.gpus_per_node and _fits(variants, shape):
                mem = f" of {shape.gpu_memory_gib:g} GiB" if shape.gpu_memory_gib else ""
                return (f"{path.stem} ({count(shape.nodes, 'node')} x {shape.gpus_per_node} "
                        f"GPUs{mem}: the plan fits)")
    return None


def _fits(variants: list[Variant], shape: JobShape) -> bool:
    configs = {v.name: v.config for v in variants}
    return all(not adapter_of(c).problems(c, shape) and memory_plan(c, shape).fits is not False
               for c in configs.values())

