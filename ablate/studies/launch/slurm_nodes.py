"""How many nodes of a Slurm partition a study can use: `sinfo`, asked once and parsed.

Why: a study's wall time is its runs divided over the runs that can really run at once, and
that is the partition's usable nodes over the nodes one run takes, not `array_parallelism`
(a cap on the array, which Slurm honours whether or not the nodes exist). A profile may state
the nodes itself (`slurm.study_nodes`: the user's share of the partition); otherwise the dry
run asks `sinfo`, and where it does not answer it says what it assumed.

One node-oriented call, one line per (node, partition) pair (sinfo(1): "--Node ... if a node
belongs to more than one partition, then one line for each node-partition pair"):

    sinfo --noheader --Node --format=%N|%P|%a|%T

%N node name, %P partition ("*" marks the default partition), %a the partition's
availability (up, down, drain, inact), %T the node's state in its long form. Long states are
what Slurm's node_state_string() returns (src/common/slurm_protocol_defs.c), in lower case:
a base word (idle, mixed, allocated, completing, drained, draining, down, fail, failing,
maint, reserved, planned, future, unknown, inval, reboot, powered_down, ...) with at most one
suffix: `*` not responding, `~` powered off, `#` powering up, `%` powering down, `!` power
down pending, `$` in a maintenance reservation, `@` reboot pending, `^` reboot issued, `+`
completing, `-` planned. A federated or multi-cluster sinfo may print `CLUSTER: name` lines;
those, and any line not of this shape, are skipped.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from ablate.number_text import count
from ablate.studies.launch.executor import Capacity, StudyNodes

if TYPE_CHECKING:
    from ablate.studies.launch.profile import Profile

SINFO_FORMAT = "%N|%P|%a|%T"
SINFO_ARGS = ("sinfo", "--noheader", "--Node", f"--format={SINFO_FORMAT}")

# Base states of a node that takes no new job now: broken, drained, held for maintenance or a
# reservation, not yet in the cluster. Everything else (idle, mixed, allocated, completing,
# planned, powered down or up on demand, rebooting) takes jobs, now or once others end.
UNUSABLE = frozenset({"down", "drained", "draining", "drain", "drng", "fail", "failing",
                      "failg", "maint", "reserved", "resv", "future", "futr", "unknown",
                      "unk", "inval", "error"})
# Suffixes that take the node out whatever its base: not responding, maintenance reservation.
UNUSABLE_SUFFIXES = frozenset("*$")
SUFFIXES = "*~#%!$@^+-"


@dataclass
class PartitionNodes:
    """One partition's nodes as sinfo lists them: `usable` take jobs (now or when free)."""

    partition: str
    total: int = 0
    usable: int = 0
    by_state: dict[str, int] = field(default_factory=dict)  # state as sinfo says it -> nodes
    available: str = "up"  # the partition's own state (%a)

    def text(self) -> str:
        """`16 nodes, 14 usable (2 drained)` as the dry run says it."""
        out = [f"{n} {s}" for s, n in sorted(self.by_state.items())
               if not node_usable(s)]
        held = f" ({', '.join(out)})" if out else ""
        part = "" if self.available == "up" else f"; the partition is {self.available}"
        return f"{count(self.total, 'node')}, {self.usable} usable{held}{part}"


def node_usable(state: str) -> bool:
    """Whether a node in this long sinfo state (`idle`, `mixed~`, `drained*`...) takes jobs."""
    s = state.strip().lower()
    suffix = s[-1] if s and s[-1] in SUFFIXES else ""
    base = s[:-1] if suffix else s
    return bool(base) and base not in UNUSABLE and suffix not in UNUSABLE_SUFFIXES


def parse_sinfo(text: str, partition: Optional[str]) -> Optional[PartitionNodes]:
    """The nodes of `partition` (None: the default one, marked `*`) in the output of
    SINFO_ARGS; None when sinfo lists no such partition. A node listed twice (two clusters
    of one federation printing the same name) counts once."""
    seen: dict[str, tuple[str, str]] = {}  # node -> (state, partition availability)
    for line in text.splitlines():
        fields = [f.strip() for f in line.split("|")]
        if len(fields) < 4:
            continue  # a header, a `CLUSTER: name` line, an empty line
        node, part, avail, state = fields[-4:]  # a federation may print a cluster column first
        is_default = part.endswith("*")
        name = part.rstrip("*")
        if not node or not state or (name != partition if partition else not is_default):
            continue
        seen[node] = (state, avail.lower())
        found_name = name
    if not seen:
        return None
    out = PartitionNodes(partition=found_name)
    for state, avail in seen.values():
        s = state.lower()
        out.total += 1
        out.by_state[s] = out.by_state.get(s, 0) + 1
        out.usable += node_usable(s)
        out.available = avail or out.available
    if out.available not in ("up", ""):
        out.usable = 0  # a partition that is down, drained or inactive starts no job
    return out


@functools.lru_cache(maxsize=8)
def ask_sinfo(partition: Optional[str]) -> tuple[Optional[PartitionNodes], str]:
    """(the partition's nodes, "") from a live `sinfo`, or (None, why not) in words. Asked
    once per process and partition (a dry run and a proposal ask the same question)."""
    if shutil.which("sinfo") is None:
        return None, "no `sinfo` here"
    try:
        r = subprocess.run(list(SINFO_ARGS), capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"`sinfo` did not answer ({type(e).__name__})"
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["no message"])[-1]
        return None, f"`sinfo` failed: {last[:120]}"
    found = parse_sinfo(r.stdout, partition)
    if found is None:
        which = f"partition {partition}" if partition else "default partition"
        return None, f"`sinfo` lists no {which}"
    return found, ""


def study_nodes(profile: Profile) -> StudyNodes:
    """The profile's `slurm.study_nodes`, else the partition's usable nodes from `sinfo`,
    else the profile's `slurm.nodes` (one run at a time), assumed."""
    s = profile.slurm
    if s.study_nodes is not None:
        return StudyNodes(s.study_nodes, "slurm.study_nodes", "slurm.study_nodes")
    found, why = ask_sinfo(s.partition)
    if found is not None:
        return StudyNodes(found.usable, "sinfo",
                          f"usable in partition {found.partition} per `sinfo`: {found.text()}")
    return StudyNodes(s.nodes, "assumed", why)


def nodes_capacity(profile: Profile, nodes_per_run: Optional[int] = None,
                   array_cap: Optional[int] = -1) -> Capacity:
    """Runs at once on Slurm: the study's nodes // `nodes_per_run` (default the profile's
    `slurm.nodes`), at most `array_cap` (default the profile's `slurm.array_parallelism`;
    None: no cap, for a proposal that writes its own). Said as `1 at once: 2-node runs on
    assumed 2 nodes (the profile's; ...)`."""
    n = nodes_per_run or profile.slurm.nodes
    cap = profile.slurm.array_parallelism if array_cap == -1 else array_cap
    where = study_nodes(profile)
    fit = where.nodes // n
    binds = cap is not None and 0 < cap < fit
    at_once = cap if binds else fit
    on = f"{n}-node runs on {where.text()}"
    if at_once == 0:
        said = f"no run can start: {on}"
    else:
        said = (f"{at_once} at once: {on}"
                + (f", capped by slurm.array_parallelism {cap}" if binds else ""))
    return Capacity("slurm", at_once, said, n, where, cap if binds else None)
