"""How many of a study's runs can run at once where they go, and the study's wall time.

Why: the study's wall time is what a lab plans by, and it is set by the nodes the runs really
get, not by `slurm.array_parallelism` (a cap Slurm applies whether or not the nodes exist). A
study of 6 runs of 2 nodes with `array_parallelism: 4` finishes in 2 waves on 8 free nodes and
in 6 on 2. So each executor counts its runs at once itself (its `capacity`); on Slurm they are the
study's nodes over the nodes one run takes (ablate/studies/launch/slurm_nodes.py
nodes_capacity, also what `ablate sweep --within` sizes by: ablate/studies/sizing.py). Here:
the study's wall time from that count, one rule for the dry run and `--within`.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ablate.studies import launch
from ablate.studies.launch.executor import Capacity
from ablate.studies.launch.profile import Profile

__all__ = ["Capacity", "capacity", "study_wall_h", "wall_text"]


def capacity(executor: str, prof: Profile) -> Capacity:
    """Runs at once under `executor` and `prof`, as the executor counts them (Slurm: the
    study's nodes over a run's, launch/slurm_nodes.py nodes_capacity)."""
    return launch.EXECUTORS[executor].capacity(prof)


def study_wall_h(walls: Sequence[float], at_once: int) -> Optional[float]:
    """Wall hours of runs of `walls` hours, `at_once` at a time, longest first, each on the
    first free slot (a lower bound: queue waits are not counted). None when none can run."""
    if at_once < 1:
        return None
    slots = [0.0] * max(1, min(at_once, len(walls)))
    for w in sorted(walls, reverse=True):
        slots[slots.index(min(slots))] += w
    return max(slots)


def wall_text(hours: float) -> str:
    """`~6,858 h wall (286 days, ~9.4 months)`: hours, and days or months when that long."""
    h = f"{hours:,.0f}" if hours >= 100 else f"{hours:.3g}"
    days = hours / 24
    if days >= 60:
        return f"~{h} h wall ({days:,.0f} days, ~{days / 30.44:.1f} months)"
    if days >= 2:
        return f"~{h} h wall ({days:.1f} days)"
    return f"~{h} h wall"
