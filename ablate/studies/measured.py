"""Plans that learn from the runs (issue 47 point 6): a study's started runs' rates.json
(what each run's plan assumed and what its steps measured: trainer/plan/rates.py) read
together, compared, and the runs not yet started re-planned from them: their time plans on
the measured speeds, lengths, job start and refill, and `generation_gpus: auto` re-chosen.

Which measurements a run not started takes: its own variant's runs where one has measured
(their completion length and kept groups too), else every measured run of the study (their
speeds, and their completions' share of the cap). Only the built-in trainer writes
rates.json; a study of another trainer has nothing measured and keeps its plans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ablate.adapters import adapter_of, plans_time
from ablate.adapters.builtin import RATES, measured
from trainer import rundir


@dataclass
class Learned:
    """What a study's runs measured, and the plans of its runs not started made from it."""

    docs: dict[str, dict] = field(default_factory=dict)  # run_id -> rates.json (started runs)
    times: dict[str, Any] = field(default_factory=dict)  # run_id -> re-planned TimePlan
    basis: dict[str, str] = field(default_factory=dict)  # run_id -> what it was planned from
    split: dict[str, str] = field(default_factory=dict)  # variant -> auto split change, words

    def to_json(self, run_id: str) -> dict:
        d = self.docs.get(run_id)
        return {"planned": d.get("planned"), "measured": measured(d)} if d else (
            {"replanned_from": self.basis[run_id]} if run_id in self.basis else {})


def started(root: Path, run_ids: list[str]) -> dict[str, dict]:
    """run_id -> rates.json of the runs that have measured a step."""
    out = {}
    for rid in run_ids:
        doc = rundir.read_rates(Path(root) / rid)
        if (doc.get("sums") or {}).get("steps"):
            out[rid] = doc
    return out


def learn(variants: list, shape: Any, limits: Any, root: Path) -> Learned:
    """The started runs' rates, and every run not started re-planned from them."""
    docs = started(root, [v.run_id for v in variants])
    got = Learned(docs=docs)
    if not docs:
        return got
    names = {v.run_id: v.name for v in variants}
    configs = {v.run_id: v.config for v in variants if plans_time(v.config)}
    plans: dict[str, tuple] = {}
    for v in variants:
        c = v.config
        if v.run_id in docs or not plans_time(c):  # another trainer: none
            continue
        if v.name not in plans:
            own = [rid for rid in docs if names.get(rid) == v.name]
            use = own or list(docs)
            replanned = adapter_of(c).replan(c, shape, limits, [docs[r] for r in use], bool(own),
                                             [configs.get(r) for r in use])
            if replanned is None:
                continue
            t, source, split = replanned
            plans[v.name] = (t, f"{source} of {'this variant' if own else 'the study'}", split)
        t, basis, split = plans[v.name]
        t.basis = basis
        got.times[v.run_id], got.basis[v.run_id] = t, basis
        if split:
            got.split[v.name] = split
    return got


def _mean(xs: list) -> Optional[float]:
    xs = [x for x in xs if isinstance(x, (int, float))]
    return sum(xs) / len(xs) if xs else None


def comparison(docs: dict[str, dict]) -> list[tuple[str, str, Optional[float], Optional[float]]]:
    """(key, words, planned, measured) per rate, the means over the started runs; rates
    neither side has are left out."""
    pairs = [(d.get("planned") or {}, measured(d)) for d in docs.values()]
    rows = []
    for key, words, _ in RATES:
        p, m = _mean([a.get(key) for a, _ in pairs]), _mean([b.get(key) for _, b in pairs])
        if p is not None or m is not None:
            rows.append((key, words, p, m))
    return rows


def value_text(key: str, x: Optional[float]) -> str:
    """A rate as a person reads it (seconds as durations, shares as percents)."""
    from ablate.adapters.builtin import dur

    if x is None:
        return "-"
    if key.endswith("_s") and not key.endswith("per_s"):
        return dur(x)
    if key == "kept_share":
        return f"{x:.0%}"
    if key == "mfu":
        return f"{x:.2f}"
    if key == "flops_per_step":
        return f"{x:.3g}"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def comparison_lines(docs: dict[str, dict], total: int, width: int) -> list[str]:
    """The planned-vs-measured table, in plain lines that fit `width` (at least 60)."""
    if not docs:
        return []
    rows = comparison(docs)
    name_w = max(10, min(max(len(w) for _, w, _, _ in rows), width - 34))
    out = [f"planned vs measured ({len(docs)} of {total} runs have measured; means):",
           f"  {'rate':<{name_w}} {'planned':>10} {'measured':>10} {'x':>7}"]
    for key, words, p, m in rows:
        ratio = f"{m / p:.2f}" if p and m is not None else ""
        out.append(f"  {words[:name_w]:<{name_w}} {value_text(key, p):>10} "
                   f"{value_text(key, m):>10} {ratio:>7}")
    return out


def ranges(variants: list, shape: Any, limits: Any, times: dict[str, Any]) -> None:
    """Before any run has measured: each planned run's range from the uncertain constants
    (its adapter's `time_range`: trainer/plan/time_plan.py plan_range), set on its TimePlan
    (`range`)."""
    done: set[str] = set()
    for v in variants:
        t = times.get(v.run_id)
        if t is None or t.step_s is None or v.name in done or not plans_time(v.config):
            continue
        done.add(v.name)
        t.range = adapter_of(v.config).time_range(v.config, shape, limits)


@dataclass
class _Run:  # what learn() reads of a variant
    run_id: str
    name: str
    seed: int
    config: Any


def study_view(study_dir: Path, width: int) -> tuple[list[str], dict[str, dict]]:
    """`ablate status`: the planned-vs-measured lines, and each run's rates for --json; the
    runs not started re-planned on the job shape the started runs recorded (no time limit:
    requeues are the dry run's, which knows the profile)."""
    from ablate.studydir import StudyStore
    from ablate.adapters.builtin import BuiltinAdapter, JobShape, Limits, dur

    rows = StudyStore(study_dir).variants()
    docs = started(study_dir, [r["run_id"] for r in rows])
    if not docs:
        return [], {}
    runs = []
    for r in rows:
        try:
            c = BuiltinAdapter.job_config(r["config"]) if r["run_id"] not in docs else None
        except (ValueError, KeyError, TypeError):
            c = None  # another trainer's config, or none recorded: nothing to re-plan
        runs.append(_Run(r["run_id"], r["name"], int(r.get("seed", 0) or 0), c))
    shape_doc = next(iter(docs.values())).get("shape") or {}
    try:
        shape = JobShape(**shape_doc)
    except TypeError:
        shape = JobShape()
    got = learn([r for r in runs if r.config is not None or r.run_id in docs], shape,
                Limits(gpu_model=shape.gpu_model), study_dir)
    lines = ["", *comparison_lines(docs, len(rows), width)]
    seen = set()
    for r in runs:
        t = got.times.get(r.run_id)
        if t is None or t.step_s is None or r.name in seen:
            continue
        seen.add(r.name)
        steps = f", {t.steps:,} steps, {t.wall_h:.3g} h" if t.steps and t.wall_h else ""
        lines.append(f"  re-planned, not started: {r.name}: step {dur(t.step_s)}{steps} "
                     f"({t.basis})")
    lines += [f"{name}: {line}" for name, line in got.split.items()]
    out = {r.run_id: got.to_json(r.run_id) for r in runs}
    for rid, t in got.times.items():
        out[rid] = {**out[rid], "replanned": {"step_s": t.step_s, "steps": t.steps,
                                              "wall_h": t.wall_h}}
    return lines, out
