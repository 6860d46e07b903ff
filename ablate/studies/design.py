"""A loaded study's design: the LoadedStudy, its points (axis assignments, in the order the study
lists them), its size, and the Variant each run is with its id.

The bottom of the study layer for every trainer: the loader (`study`) and `expand` build every
trainer's study from it, asking the trainer's adapter (ablate/adapters) for the base config,
each point's configs and their ids; the adapters import nothing of the study layer.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from ablate.number_text import count
from ablate.adapters.builtin import Assignment, Provenance
from ablate.errors import InputError
from ablate.studies.schema import Study
from ablate.value_text import value_text
from ablate.yamlio import YamlDoc

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
    config: Any  # its trainer's validated config (a TrainConfig, or another trainer's)

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "name": self.name,
            "seed": self.seed,
            "config": self.config.model_dump(mode="json"),
        }


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
        f"{count(len(s.seeds), 'seed')}), above max_variants {s.max_variants:,}; drop values, use mode "
        "one_at_a_time, or set `max_variants:` in the study if you mean it")
