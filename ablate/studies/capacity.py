"""How many of a study's runs can run at once where they go, and the study's wall time.

Why: the study's wall time is what a lab plans by, and it is set by the nodes the runs really
get, not by `slurm.array_parallelism` (a cap Slurm applies whether or not the nodes exist). A
study of 6 runs of 2 nodes with `array_parallelism: 4` finishes in 2 waves on 8 free nodes and
in 6 on 2. So on Slurm the runs at once are the study's nodes over the nodes one run takes,
the nodes coming from, in order: the profile's `slurm.study_nodes` (the user's share), the
partition's usable nodes as `sinfo` lists them (ablate/studies/launch/slurm_nodes.py), or,
where `sinfo` does not answer, the profile's own `slurm.nodes`, said as assumed. One rule for
the dry run's study line and for `ablate sweep --within` (ablate/studies/sizing.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Sequence

from ablate.studies.launch.profile import Profile
from ablate.studies.launch.slurm_nodes import ask_sinfo


@dataclass(frozen=True)
class StudyNodes:
    """The nodes a study may hold at once on Slurm, and where that number comes from."""

    nodes: int
    source: str  # "slurm.study_nodes" | "sinfo" | "assumed"
    detail: str  # in words, for the dry run

    def text(self) -> str:
        n = f"{self.nodes} node{'s' if self.nodes != 1 else ''}"
        if self.source == "assumed":
            return f"assumed {n} (the profile's; {self.detail})"
        return f"{n} ({self.detail})"


def study_nodes(prof: Profile) -> StudyNodes:
    """The profile's `slurm.study_nodes`, else the partition's usable nodes from `sinfo`,
    else the profile's `slurm.nodes` (one run at a time), assumed."""
    s = prof.slurm
    if s.study_nodes is not None:
        return StudyNodes(s.study_nodes, "slurm.study_nodes", "slurm.study_nodes")
    found, why = ask_sinfo(s.partition)
    if found is not None:
        return StudyNodes(found.usable, "sinfo",
                          f"usable in partition {found.partition} per `sinfo`: {found.text()}")
    return StudyNodes(s.nodes, "assumed", why)


@dataclass(frozen=True)
class Capacity:
    """Runs of a study at once under an executor, and why that many."""

    executor: str
    runs_at_once: int  # 0: not one run fits on the study's nodes
    nodes_per_run: int = 1
    nodes: Optional[StudyNodes] = None  # Slurm only
    array_cap: Optional[int] = None  # slurm.array_parallelism, when it is what binds

    def text(self) -> str:
        """`1 at once: 2-node runs on assumed 2 nodes (the profile's; ...)`."""
        if self.executor != "slurm":
            return {"local": f"{self.runs_at_once} at once (local.max_parallel)"}.get(
                self.executor, "one at a time (in this process)")
        on = f"{self.nodes_per_run}-node runs on {self.nodes.text()}"
        if self.runs_at_once == 0:
            return f"no run can start: {on}"
        cap = (f", capped by slurm.array_parallelism {self.array_cap}"
               if self.array_cap is not None else "")
        return f"{self.runs_at_once} at once: {on}{cap}"

    def to_json(self) -> dict:
        out = asdict(self)
        out["nodes"] = asdict(self.nodes) if self.nodes else None
        return out


def capacity(executor: str, prof: Profile, nodes_per_run: Optional[int] = None,
             array_cap: Optional[int] = -1) -> Capacity:
    """Runs at once under `executor` and `prof`. Slurm: the study's nodes // `nodes_per_run`
    (default the profile's `slurm.nodes`), at most `array_cap` (default the profile's
    `slurm.array_parallelism`; None: no cap, for a proposal that writes its own)."""
    if executor == "local":
        return Capacity("local", prof.local.max_parallel)
    if executor != "slurm":
        return Capacity(executor, 1)
    n = nodes_per_run or prof.slurm.nodes
    cap = prof.slurm.array_parallelism if array_cap == -1 else array_cap
    where = study_nodes(prof)
    fit = where.nodes // n
    if cap is not None and 0 < cap < fit:
        return Capacity("slurm", cap, n, where, cap)
    return Capacity("slurm", fit, n, where)


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
