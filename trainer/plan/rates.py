"""A run's rates: what its time plan assumed and what its steps measured (the run dir's
rates.json, written by trainer/loop/rates.py), side by side, and the calibration a plan of
runs not yet started takes from them (issue 47 point 6: plans that learn from the runs).

rates.json = {"version": 1,
              "planned": {RATE: value, ...}          the plan of this run on its job's shape
              "sums": {...}                           what its steps added up, every attempt
              "attempts": [{"resumed_from", "start_s", "first_step_s"}, ...]}
A rate is per step unless its name says otherwise (RATES below: name, unit, words).

Pure Python (no torch): `ablate sweep --dry-run` and `ablate status` read it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from trainer.plan.time_model import ASSUMED, Assume

# (key, words, unit) in the order they are shown
RATES = (("step_s", "step", "s"),
         ("generation_s", "generation a step", "s"),
         ("train_s", "training a step", "s"),
         ("generation_tokens_per_s_engine", "generation tokens/s per engine", "tok/s"),
         ("train_tokens_per_s", "training tokens/s", "tok/s"),
         ("mfu", "training MFU", ""),
         ("completion_tokens", "completion tokens (mean)", "tok"),
         ("kept_share", "groups trained (zero-variance filter)", ""),
         ("flops_per_step", "FLOPs a step", "FLOP"),
         ("eval_s", "eval", "s"),
         ("job_start_s", "job start", "s"),
         ("refill_s", "refill after a (re)start", "s"))


def planned_rates(tp, c) -> dict:
    """The rates a time plan (trainer/plan/time_jobs.py TimePlan) took for config `c`."""
    from trainer.plan.time_model import TRAIN_MFU, completion_cap, sample_counts

    if tp.step_s is None:
        return {}
    samples = c.rollout.prompts_per_step * c.rollout.generations_per_prompt
    _, p, comp = sample_counts(c, ASSUMED.with_(completion=tp.completion_tokens))
    tokens = (tp.kept_share or 1.0) * samples * (p + comp)  # as the trainer's `tokens` counts
    return {"step_s": tp.step_s, "generation_s": tp.generation_s, "train_s": tp.train_s,
            "generation_tokens_per_s_engine": (tp.generation_tokens_per_s or 0.0)
            / max(tp.engines or 1, 1),
            "train_tokens_per_s": tokens / tp.train_s if tp.train_s else None,
            "mfu": TRAIN_MFU if tp.peak_flops else None,
            "completion_tokens": tp.completion_tokens, "kept_share": tp.kept_share,
            "flops_per_step": tp.flops_per_step, "eval_s": tp.eval_s,
            "job_start_s": tp.job_start_s, "refill_s": tp.refill_s,
            # what the calibration divides by (trainer units: 6N a processed token)
            "train_flops_per_step": tp.train_flops_per_step, "engines": tp.engines,
            "peak_flops": tp.peak_flops, "steps": tp.steps, "completion_cap": completion_cap(c),
            "overlap": tp.overlap.startswith("pipeline: generation and training overlap")}


def measured(doc: dict) -> dict:
    """The measured rates of a rates.json (per step means over every attempt; {} before the
    first step)."""
    s = doc.get("sums") or {}
    steps = s.get("steps") or 0
    if steps <= 0:
        return {}
    planned = doc.get("planned") or {}
    out: dict[str, Optional[float]] = {
        "steps": steps, "step_s": s["wall_s"] / steps,
        "generation_s": s["generation_s"] / steps, "train_s": s["train_s"] / steps,
        "completion_tokens": s["completion_tokens"] / max(s["samples"], 1),
        "kept_share": s["kept_groups"] / max(s["groups"], 1),
        "flops_per_step": s["flops"] / steps,
        "generation_tokens_per_s_engine": (s["completion_tokens"] / s["generation_s"]
                                           / max(planned.get("engines") or 1, 1)
                                           if s["generation_s"] > 0 else None),
        "train_tokens_per_s": s["train_tokens"] / s["train_s"] if s["train_s"] > 0 else None,
        "train_flops_per_step": s["train_flops"] / steps}
    speed = train_speed(planned, out)
    out["mfu"] = planned["mfu"] * speed if planned.get("mfu") and speed else None
    if s.get("evals"):
        out["eval_s"] = s["eval_s"] / s["evals"]
    attempts = doc.get("attempts") or []
    starts = [a["start_s"] for a in attempts if a.get("start_s") is not None]
    if starts:
        out["job_start_s"] = sum(starts) / len(starts)
    firsts = [a["first_step_s"] for a in attempts if a.get("first_step_s") is not None]
    if firsts and steps > len(firsts):
        steady = (s["wall_s"] - sum(firsts)) / (steps - len(firsts))
        out["refill_s"] = sum(max(0.0, f - steady) for f in firsts) / len(firsts)
    return out


def train_speed(planned: dict, got: dict) -> Optional[float]:
    """Measured training FLOP/s over the plan's, both in the trainer's units (6N a processed
    token): how much faster training ran than the MFU (or the CPU constant) said."""
    pf, pt = planned.get("train_flops_per_step"), planned.get("train_s")
    mf, mt = got.get("train_flops_per_step"), got.get("train_s")
    if not (pf and pt and mf and mt):
        return None
    return (mf / mt) / (pf / pt)


def calibration(docs: list[dict], cap: float, base: Assume = ASSUMED,
                same_variant: bool = True, configs: Optional[list] = None) -> Optional[Assume]:
    """What a plan takes from the measured runs `docs` (rates.json documents, at least one
    step each; `configs`: each one's TrainConfig where known): their mean speed-ups over their
    own plans (generation tokens/s, training FLOP/s, eval), a step measured over its plan on
    those (step_factor: what the model leaves out), job start and refill; and, from the same
    variant's runs (`same_variant`), its completion length and the share of groups it
    trained, else the runs' share of their own caps times `cap`. None when no run has
    measured a step."""
    configs = list(configs) if configs is not None else [None] * len(docs)
    got = [(d.get("planned") or {}, measured(d), d, c) for d, c in zip(docs, configs)]
    got = [(p, m, d, c) for p, m, d, c in got if m and p and "step_s" in p]
    if not got:
        return None

    def mean(xs: list) -> Optional[float]:
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else None

    gen = mean([m["generation_tokens_per_s_engine"] / p["generation_tokens_per_s_engine"]
                for p, m, _, _ in got if m.get("generation_tokens_per_s_engine")
                and p.get("generation_tokens_per_s_engine")])
    train = mean([train_speed(p, m) for p, m, _, _ in got])
    ev = mean([p["eval_s"] / m["eval_s"] * (m["completion_tokens"] / p["completion_tokens"])
               for p, m, _, _ in got if m.get("eval_s") and p.get("eval_s")
               and p.get("completion_tokens")])
    a = replace(base, gen_speed=gen or 1.0, train_speed=train or 1.0, eval_speed=ev or 1.0,
                source=f"measured on {len(got)} run{'s' * (len(got) != 1)}")
    factors = [step_factor(p, m, d, c, a) for p, m, d, c in got]
    if same_variant:
        a = replace(a, completion=mean([m["completion_tokens"] for _, m, _, _ in got]),
                    kept_share=mean([m["kept_share"] for _, m, _, _ in got]) or 1.0)
    else:
        share = mean([m["completion_tokens"] / p["completion_cap"] for p, m, _, _ in got
                      if p.get("completion_cap")])
        a = replace(a, completion=share * cap if share else None)
    return replace(a, job_start_s=mean([m.get("job_start_s") for _, m, _, _ in got]),
                   refill_s=mean([m.get("refill_s") for _, m, _, _ in got]),
                   step_factor=mean(factors) or 1.0)


def step_factor(planned: dict, got: dict, doc: dict, config, a: Assume) -> Optional[float]:
    """A run's measured step over its own plan on the measured speed-ups, lengths and kept
    groups (re-planned where its config is known, on the job shape it recorded; else its
    plan's generation and training scaled by the measured tokens): what the model leaves out
    of a step (the push, the reward, Python; on CPU one GIL)."""
    if not got.get("step_s"):
        return None
    if config is not None:
        from trainer.plan.time_jobs import Limits
        from trainer.plan.time_plan import plan_time
        from trainer.plan.topology import JobShape

        try:
            shape = JobShape(**(doc.get("shape") or {}))
        except TypeError:
            shape = JobShape()
        t = plan_time(config, shape, Limits(gpu_model=shape.gpu_model), replace(
            a, completion=got["completion_tokens"], kept_share=got["kept_share"]))
        return got["step_s"] / t.step_s if t.step_s else None
    pg, pt, pc = planned.get("generation_s"), planned.get("train_s"), \
        planned.get("completion_tokens")
    pf = planned.get("train_flops_per_step")
    if not (pg is not None and pt and pc and pf):
        return None
    g = pg * got["completion_tokens"] / pc / a.gen_speed
    t = pt * got["train_flops_per_step"] / pf / a.train_speed
    both = max(g, t) if planned.get("overlap") else g + t
    return got["step_s"] / both if both > 0 else None
