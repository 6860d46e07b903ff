"""`ablate sweep --dry-run`: the runs a study expands to, and each one's GPU memory plan.

The plan (trainer/resources.py) is what a cluster user needs before queueing for hours: per
variant, GiB per training GPU by term (ZeRO-partitioned weights, gradients, optimizer states,
activations, the LM head's logits chunk) and per generation GPU (weights + KV cache), against
the profile's `gpu_memory_gib`, with the largest term named.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

from rich.console import Console
from rich.table import Table

from ablate.studies.expand import Variant
from trainer.validate import JobShape


def _terms(terms: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in terms.items())


def shape_text(shape: JobShape, plan: Any) -> str:
    gpus = ("GPUs not known here" if shape.gpus_per_node is None
            else f"{shape.gpus_per_node} GPUs" if shape.gpus_per_node else "no GPUs")
    mem = f" of {shape.gpu_memory_gib:g} GiB" if shape.gpu_memory_gib else ""
    return f"{shape.nodes} node(s) x {shape.ranks_per_node} rank(s), {gpus}{mem} per node"


def plan_lines(name: str, p: Any) -> list[str]:
    """Two or three plain lines for one variant's plan."""
    if p.train_gib_per_gpu is None:
        return [f"{name}: {p.note}"]
    verdict = ("" if p.fits is None else f" of {p.train_budget_gib:g} -> "
               + ("fits" if p.fits else "DOES NOT FIT"))
    lines = [f"{name}: {p.model} ({p.params_b:g}B params), {p.dp} training rank(s), "
             f"{p.tokens_per_forward:,} tokens per forward/backward",
             f"  training GiB/GPU {p.train_gib_per_gpu:g}{verdict}; largest: {p.largest}; "
             f"{_terms(p.train)}",
             f"  generation ({p.generation_where}) GiB/GPU {p.generation_gib_per_gpu:g}: "
             f"{_terms(p.generation)}" + (f" ({p.kv_sequences})" if p.kv_sequences else "")]
    if p.note:
        lines.append(f"  {p.note}")
    return lines


def resources_json(p: Any) -> dict[str, Any]:
    """The `resources` object of one run in `sweep --dry-run --json`."""
    return {"train_gib_per_gpu": p.train_gib_per_gpu,
            "generation_gib_per_gpu": p.generation_gib_per_gpu, "gpu_gib": p.gpu_gib,
            "fits": p.fits, "largest": p.largest, "train_budget_gib": p.train_budget_gib,
            "train_terms_gib": p.train, "generation_terms_gib": p.generation,
            "generation_where": p.generation_where, "kv_sequences": p.kv_sequences,
            "training_ranks": p.dp, "tokens_per_forward": p.tokens_per_forward,
            "params_b": p.params_b, "model": p.model, "note": p.note}


def print_dry_run(study: str, variants: list[Variant], shape: JobShape, as_json: bool) -> None:
    from ablate.studies.sweep import resource_plans

    plans = resource_plans(variants, shape)
    if as_json:
        print(json.dumps([{**v.to_json(), "resources": resources_json(plans[v.run_id])}
                          for v in variants]))
        return
    con = Console()
    t = Table(title=f"{study}: {len(variants)} runs")
    for col in ("run_id", "name", "seed", "train GiB/GPU", "gen GiB/GPU", "fits"):
        t.add_column(col)
    for v in variants:
        p = plans[v.run_id]
        fits = "" if p.fits is None else ("yes" if p.fits else "NO")
        t.add_row(v.run_id, v.name, str(v.seed), _num(p.train_gib_per_gpu),
                  _num(p.generation_gib_per_gpu), fits)
    con.print(t)
    con.print(f"Resource plan per GPU ({shape_text(shape, None)}; GiB; trainer/resources.py):",
              markup=False, highlight=False)
    # Variants with the same plan (an axis that does not change memory) are listed once.
    groups: dict[tuple[str, ...], list[str]] = {}
    for v in variants:
        names = groups.setdefault(tuple(plan_lines("", plans[v.run_id])), [])
        if v.name not in names:
            names.append(v.name)
    for lines, names in groups.items():
        for line in [" | ".join(names) + lines[0], *lines[1:]]:
            con.print(line, markup=False, highlight=False, soft_wrap=True)


def _num(x: Any) -> str:
    return "" if x is None else f"{x:g}"


def dry_run(study: Path, *, executor: Optional[str], profile: Optional[str],
            overrides: list[str], as_json: bool) -> None:
    """`ablate sweep --dry-run`: check the study exactly as `sweep` does, print, write nothing."""
    from ablate.studies.sweep import check_inputs

    _, variants, prof = check_inputs(study, executor=executor, profile=profile,
                                     overrides=overrides)
    print_dry_run(str(study), variants, prof.job_shape(executor), as_json)
