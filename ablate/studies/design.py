"""A loaded study's design: the LoadedStudy, its points (axis assignments, in the order the study
lists them), its size, and the Variant each run is with its id.

The bottom of the study layer for every trainer: `expand` builds the built-in trainer's variants
from it and `ablate.adapters.study` another trainer's. The loader (`study`) and `expand` hand a
foreign study to the adapter; the adapter imports only this module, not them, so the imports
run one way.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ablate.errors import InputError
from ablate.adapters.builtin.provenance import Provenance
from ablate.studies.schema import Study
from ablate.value_text import value_text
from ablate.yamlio import YamlDoc
from trainer.config import TrainConfig

Assignment = tuple[tuple[str, ...], Any, str]  # (config keys, value, where it was written)


@dataclass
class LoadedStudy:
    """A validated study plus the resolved base config (nested dict) it expands from."""

    study: Study
    doc: YamlDoc
    base_tree: dict[str, Any]
    prov: Provenance = field(default_factory=dict)
    recipes: list[Path] = field(default_factory=list)
    cli_overrides: list[str] = field(default_factory=list)  # `sweep --override KEY=VALUE`, as given

    @property
    def path(self) -> Path:
        return self.doc.path


@dataclass(frozen=True)
class Variant:
    """One run: a readable name (shared by its seeds), a seed, the full config, and its id."""

    run_id: str
    name: str
    seed: int
    config: TrainConfig

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "name": self.name,
            "seed": self.seed,
            "config": self.config.model_dump(mode="json"),
        }


def run_id_of(config_json: dict[str, Any]) -> str:
    """Short hash of the resolved config (which includes the seed): 12 hex chars. Settings that
    change where a run is logged, how often it checkpoints, or how its work is cut to fit the
    GPUs, not what it computes, are left out (`logging`, `checkpoint`, `rollout.vllm`,
    `engine.micro_batch_tokens`: micro-batches sum to the same gradient;
    `engine.collective_timeout_minutes`: how long a stuck job waits), so changing them to
    fix an OOM, add a tracker or checkpoint more often resumes the run instead of starting a
    new one."""
    config_json = {k: v for k, v in config_json.items() if k not in ("logging", "checkpoint")}
    for section, key in (("rollout", "vllm"), ("engine", "micro_batch_tokens"),
                         ("engine", "collective_timeout_minutes")):
        if isinstance(config_json.get(section), dict):
            config_json[section] = {k: v for k, v in config_json[section].items() if k != key}
    blob = json.dumps(config_json, sort_keys=True, separators=(",", ":"))
    return hashlib.sha1(blob.encode()).hexdigest()[:12]


def points(ls: LoadedStudy) -> Iterator[tuple[str, list[Assignment]]]:
    """(name, assignments) for each design point, in the order the study lists them."""
    s, doc = ls.study, ls.doc
    axes = [
        [(tuple(path.split(".")), v, doc.where(("axes", path, str(i)))) for i, v in enumerate(vals)]
        for path, vals in s.axes.items()
    ]

    def name(assign: list[Assignment]) -> str:
        return ",".join(f"{'.'.join(k)}={value_text(v)}" for k, v, _ in assign) or "base"

    if s.mode == "grid":
        varied = [len(a) > 1 for a in axes]
        for combo in itertools.product(*axes):
            shown = [a for a, show in zip(combo, varied) if show] or list(combo)
            yield name(shown), list(combo)
    elif s.mode == "one_at_a_time":
        yield "base", []
        for axis in axes:
            for a in axis:
                yield name([a]), [a]
    elif s.mode == "zip":
        for combo in zip(*axes):
            yield name(list(combo)), list(combo)
    elif s.mode == "leave_one_out":
        yield "base", []
        for comp, reverted in s.components.items():
            assign = [
                (tuple(path.split(".")), v, doc.where(("components", comp, path)))
                for path, v in reverted.items()
            ]
            yield f"revert={comp}", assign


def design_points(s: Study) -> int:
    """How many design points `points` yields, from the axis lengths alone (never expanding).
    Stages add none: each stage continues the same runs to a larger budget."""
    lengths = [len(v) for v in s.axes.values()]
    if s.mode == "grid":
        return math.prod(lengths)  # no axes: 1, the base
    if s.mode == "one_at_a_time":
        return 1 + sum(lengths)
    if s.mode == "zip":
        return min(lengths, default=1)  # load_study checked the lengths are equal
    return 1 + len(s.components)  # leave_one_out


def check_size(ls: LoadedStudy) -> None:
    """Refuse a study above its `max_variants` before building a single config: a grid of
    5 axes x 20 values (3.2M runs) would otherwise hang `sweep --dry-run` for many minutes."""
    s = ls.study
    runs = design_points(s) * len(s.seeds)
    if runs <= s.max_variants:
        return
    axes = " x ".join(f"{p} ({len(v)})" for p, v in s.axes.items()) or f"{len(s.components)} components"
    raise InputError(
        f"{ls.doc.where(('axes',))}: the study expands to {runs:,} runs ({s.mode}: {axes}; "
        f"{len(s.seeds)} seed(s)), above max_variants {s.max_variants:,}; drop values, use mode "
        "one_at_a_time, or set `max_variants:` in the study if you mean it")
