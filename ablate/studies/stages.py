"""Adaptive studies: spend compute on the variants that can still win.

A study with `stages:` (ablate.studies.stagespec) runs every variant to the first stage budget; then
each variant is fitted (its seeds pooled, the study's `fit:` window) and stops when

  * interval rule: its A's 95% upper bound is below another variant's A lower bound (it cannot
    be the best however the uncertainty falls), or
  * margin rule (only with `stages.baseline`): its fitted A is below the baseline's by more than
    `stages.margin` (the paper's rule for "worse than the base").

  * collapse rule: its fit is refused and its score fell with training (the mean of its last 3
    evaluations, seeds averaged, is COLLAPSE_DROP below its best 3-evaluation mean) to below
    the best variant's A lower bound. Unstable recipes do this, the paper's reason to drop
    them: on the proxy an LR 40x the recipe's falls from 0.49 to 0.03, and sampling at
    temperature 0.2 rises to 0.72 and sinks back to 0.5 (benchmarks/RESULTS.md). Their fits
    are refused ("flat or decreasing"), so no rule on A could ever stop them.

Survivors continue from their checkpoints to the next budget, and the last stage is the
study's `budget`. Any other variant whose fit fails (too few points, not yet rising) is kept:
nothing is stopped on a curve we cannot read.

State lives in files, so an interrupted study is resumed by rerunning `ablate sweep`:

    <study>/stages.json   {"budgets": [...], "decisions": [one per finished stage]}

A run's id is the hash of its config at the study's final budget, so an adaptive study's runs
are exactly the full-grid study's runs; its `config.yaml` holds the budget of its current
stage. Promoting a run rewrites that budget, marks its status `pending` (the trainer resumes a
done run with a larger budget from its checkpoint) and starts its submission record afresh.
The decision is written before any run is promoted, and promotion is idempotent, so a crash
in between is repaired by the next `ablate sweep`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from ablate.analysis import A_MARGIN
from ablate.analysis.fitgroups import GroupFit
from ablate.errors import InputError
from ablate.studies.expand import Variant
from ablate.studies.stagespec import limit_of
from ablate.studies.store import StudyStore
from ablate.studies.study import LoadedStudy
from trainer.rundir import atomic_write

if TYPE_CHECKING:
    import pandas as pd

STATE_FILE = "stages.json"
# How far a refused fit's score must fall from its best before the collapse rule stops it: well
# beyond eval noise (+-0.02 on the proxy's 256-problem pool), so a flat, noisy curve that has
# not started rising is never taken for a collapse.
COLLAPSE_DROP = 0.05


# ---------------------------------------------------------------------------------------------
# Checking the study file (before anything is written).


def check_stages(loaded: LoadedStudy) -> None:
    """Stage budgets use the final budget's single limit and stay below it; the baseline names
    a variant. Raises InputError naming the study file's line."""
    s, doc = loaded.study, loaded.doc
    if s.stages is None:
        return
    where = doc.where(("stages",))
    if s.budget is None:
        raise InputError(f"{where}: stages need the study's `budget` (the last stage)")
    try:
        kind, final = limit_of(s.budget)
    except ValueError as e:
        raise InputError(f"{doc.where(('budget',))}: with stages, {e}") from None
    for i, b in enumerate(s.stages.budgets):
        k, v = limit_of(b)
        if k != kind or v >= final:
            raise InputError(f"{doc.where(('stages', 'budgets', str(i)))}: stage budget "
                             f"{{{k}: {v:g}}} must be {kind} below the final budget "
                             f"{{{kind}: {final:g}}}")


def check_baseline(loaded: LoadedStudy, variants: list[Variant]) -> None:
    st = loaded.study.stages
    if st is None or st.baseline is None:
        return
    names = list(dict.fromkeys(v.name for v in variants))
    if st.baseline not in names:
        raise InputError(f"{loaded.doc.where(('stages', 'baseline'))}: stages.baseline "
                         f"'{st.baseline}' is not a variant; variants: {', '.join(names)}")


def all_budgets(loaded: LoadedStudy) -> list[dict[str, float]]:
    """Stage budgets then the final one, as {kind: value} dicts."""
    s = loaded.study
    assert s.stages is not None and s.budget is not None
    return [b.model_dump(exclude_none=True) for b in [*s.stages.budgets, s.budget]]


# ---------------------------------------------------------------------------------------------
# The decision (pure: fits in, stops out).


@dataclass
class Decision:
    stage: int
    budget: dict[str, float]
    kept: list[str]
    stopped: dict[str, str]  # variant -> reason
    fits: dict[str, dict[str, Any]]  # variant -> {"A", "A_ci"} or {"error"}

    def to_json(self) -> dict[str, Any]:
        return {"stage": self.stage, "budget": self.budget, "kept": self.kept,
                "stopped": self.stopped, "fits": self.fits, "at": time.time()}


def decide(groups: list[GroupFit], *, margin: float = A_MARGIN, baseline: str | None = None,
           stage: int = 0, budget: dict[str, float] | None = None,
           dead: dict[str, str] | None = None,
           levels: dict[str, tuple[float, float]] | None = None) -> Decision:
    """Which variants stop after a stage. `dead` maps variants whose runs all ended without a
    curve to continue (diverged / failed for good) to why; they stop too. `levels` maps a
    variant to its observed (best, recent) score (`score_levels`), for the collapse rule."""
    dead = dict(dead or {})
    ok = [g for g in groups if g.fit is not None and g.variant not in dead]
    ci = {g.variant: g.fit.ci.get("A", (g.fit.A, g.fit.A)) for g in ok}
    stopped: dict[str, str] = {v: why for v, why in dead.items()}
    fits: dict[str, dict[str, Any]] = {}
    for g in groups:
        fits[g.variant] = ({"A": g.fit.A, "A_ci": list(ci.get(g.variant, (g.fit.A, g.fit.A)))}
                           if g.fit is not None else {"error": g.error})
    if ok:
        top = max(ok, key=lambda g: (ci[g.variant][0], g.fit.A))
        top_lo = ci[top.variant][0]
        base = next((g for g in ok if g.variant == baseline), None)
        for g in ok:
            hi = ci[g.variant][1]
            if g is not top and hi < top_lo:
                stopped[g.variant] = (f"stage {stage}: A upper bound {hi:.3f} < {top.variant}'s "
                                      f"A lower bound {top_lo:.3f}")
            elif base is not None and g is not base and g.fit.A < base.fit.A - margin:
                stopped[g.variant] = (f"stage {stage}: A {g.fit.A:.3f} below baseline "
                                      f"{base.variant}'s {base.fit.A:.3f} by more than {margin:g}")
        for g in groups:
            lv = (levels or {}).get(g.variant)
            if g.fit is None and g.variant not in stopped and lv and collapsed(lv, top_lo):
                stopped[g.variant] = (f"stage {stage}: score fell from {lv[0]:.3f} to {lv[1]:.3f} "
                                      f"(collapsed), below {top.variant}'s A lower bound "
                                      f"{top_lo:.3f}")
    kept = [g.variant for g in groups if g.variant not in stopped]
    return Decision(stage, dict(budget or {}), kept, stopped, fits)


def collapsed(level: Sequence[float], bound: float) -> bool:
    """The collapse rule (module docstring) on a (best, recent) score level: the score fell
    COLLAPSE_DROP from its best, to below `bound` (the best variant's A lower bound)."""
    best, recent = level
    return recent < min(best - COLLAPSE_DROP, bound)


def run_level(scores: Any, k: int = 3) -> tuple[float, float] | None:
    """(best, recent) of one run's scores in compute order: its running mean over `k`
    evaluations at its highest and at its last (averaging keeps one lucky draw from being the
    best); None with fewer than k evaluations."""
    y = np.asarray(scores, dtype=float)
    if y.size < k:
        return None
    smooth = np.convolve(y, np.ones(k) / k, mode="valid")
    return float(smooth.max()), float(smooth[-1])


def score_levels(frame: pd.DataFrame, k: int = 3) -> dict[str, tuple[float, float]]:
    """variant -> (best, recent) score, its seeds' `run_level`s averaged, from a tidy curves
    frame (columns variant, seed, compute, score)."""
    out = {}
    for v, g in frame.sort_values("compute").groupby("variant", sort=False):
        runs = [lv for _, r in g.groupby("seed") if (lv := run_level(r["score"], k)) is not None]
        if runs:
            out[str(v)] = (float(np.mean([b for b, _ in runs])),
                           float(np.mean([r for _, r in runs])))
    return out


# ---------------------------------------------------------------------------------------------
# State on disk.


def read_state(study_dir: Path) -> dict[str, Any]:
    f = Path(study_dir) / STATE_FILE
    try:
        state = json.loads(f.read_text())
    except FileNotFoundError:
        return {"budgets": [], "decisions": []}
    except ValueError as e:
        raise InputError(f"{f}: unreadable ({e}); delete it to re-decide every stage") from None
    if not isinstance(state, dict) or not isinstance(state.get("decisions"), list):
        raise InputError(f"{f}: expected {{\"budgets\": [...], \"decisions\": [...]}}")
    return state


def stopped_variants(study_dir: Path) -> dict[str, dict[str, Any]]:
    """variant -> {"stage", "budget", "reason"} for every variant an adaptive study stopped
    ({} for other studies); what `status` and `compare` show."""
    out: dict[str, dict[str, Any]] = {}
    for d in read_state(study_dir)["decisions"]:
        for v, why in d.get("stopped", {}).items():
            out.setdefault(v, {"stage": d["stage"], "budget": d.get("budget"), "reason": why})
    return out


def budget_text(budget: dict[str, float] | None) -> str:
    """{"flops": 5e11} -> "flops 5e+11" (how status names a stage's budget)."""
    return ", ".join(f"{k} {v:g}" for k, v in (budget or {}).items()) or "?"


def _run_budget(run_dir: Path) -> dict[str, Any] | None:
    try:
        return (yaml.safe_load((run_dir / "config.yaml").read_text()) or {}).get("budget")
    except (OSError, yaml.YAMLError, AttributeError):
        return None


def _reaches(run_budget: dict[str, Any] | None, target: dict[str, float]) -> bool:
    """True when a run configured with `run_budget` trains at least to `target`."""
    if not run_budget:
        return False
    (kind, val), = target.items()
    got = run_budget.get(kind)
    return got is not None and float(got) >= val


def _stage_variant(v: Variant, budget: dict[str, float]) -> Variant:
    """The same run (same id) configured for one stage's budget."""
    cfg = v.config.model_copy(update={"budget": type(v.config.budget).model_validate(budget)})
    return replace(v, config=cfg)


def _promote(store: StudyStore, run_ids: list[str], budget: dict[str, float], stage: int) -> None:
    """Point survivors' runs at the next budget so the next submission continues them."""
    from ablate.studies.launch.job import set_state
    from trainer.rundir import read_status

    subs = store.submissions()
    history: dict[str, Any] = {}
    for rid in run_ids:
        d = store.run_dir(rid)
        cfg_path = d / "config.yaml"
        try:
            cfg = yaml.safe_load(cfg_path.read_text())
        except OSError:
            continue  # never created: its first submission writes it with the stage's budget
        if _reaches(cfg.get("budget"), budget):
            continue  # promoted already (the config is rewritten last, below)
        if rid in subs:  # a fresh record: attempts count per stage, the old jobs are kept
            history[rid] = subs.pop(rid)
            atomic_write(store.submissions_path, json.dumps(subs, indent=1, sort_keys=True))
        status = read_status(d)
        if status.get("state") == "done":
            # The trainer's progress is a share of the old budget: restate it against the new
            # one, so status shows how far the promoted run is rather than 100%.
            (kind, new), = budget.items()
            old = (cfg.get("budget") or {}).get(kind)
            share = ({"progress": round(status["progress"] * float(old) / new, 4)}
                     if old and status.get("progress") is not None else {})
            set_state(d, "pending", stage=stage, **share)
        cfg["budget"] = dict(budget)
        atomic_write(cfg_path, yaml.safe_dump(cfg, sort_keys=False))
    if history:
        f = store.root / "stage_submissions.json"
        old = json.loads(f.read_text()) if f.exists() else []
        atomic_write(f, json.dumps([*old, {"stage": stage - 1, "jobs": history}], indent=1))


# ---------------------------------------------------------------------------------------------
# The controller.


@dataclass
class StageReport:
    stage: int  # index into budgets of the stage now running (== len(budgets) when finished)
    budgets: list[dict[str, float]]
    decisions: list[dict[str, Any]]
    submitted: list[str]
    skipped: list[str]
    executor: str
    study_dir: str
    finished: bool

    def to_json(self) -> dict[str, Any]:
        return {"submitted": self.submitted, "skipped": self.skipped, "executor": self.executor,
                "study_dir": self.study_dir, "stage": self.stage, "budgets": self.budgets,
                "decisions": self.decisions, "finished": self.finished}


def _stage_complete(store: StudyStore, runs: list[Variant], budget: dict[str, float],
                    max_attempts: int) -> bool:
    from ablate.studies.status import run_states

    states = {s.run_id: s for s in run_states(store, [v.to_json() for v in runs])}
    for v in runs:
        st = states[v.run_id]
        if st.state in ("done", "diverged") and (st.state == "diverged"
                                                 or _reaches(_run_budget(store.run_dir(v.run_id)), budget)):
            continue
        if st.state in ("failed", "interrupted") and st.attempts >= max_attempts:
            continue
        return False
    return True


def _fit_stage(store: StudyStore, names: list[str]
               ) -> tuple[list[GroupFit], dict[str, tuple[float, float]]]:
    """Each variant's fit, and its observed (best, recent) score for the collapse rule. The
    fits come from the pipeline `compare` uses (ablate.analysis.pipeline): the stage's variants
    share one window, so a stop is decided on the same spans compare ranks."""
    from ablate.analysis.pipeline import Options, common_window, fit_all
    from ablate.analysis.sources import load

    curves = load(store.root)
    frame = curves.frame[curves.frame["variant"].isin(names)]
    curves = replace(curves, frame=frame)
    opts = Options()
    got = {g.variant: g for g in fit_all(curves, opts, common_window(curves, opts))} \
        if len(frame) else {}
    return ([got.get(n) or GroupFit(n, None, f"variant {n!r}: no evaluation points yet", 0)
             for n in names], score_levels(frame) if len(frame) else {})


def _dead(store: StudyStore, runs: list[Variant], names: list[str]) -> dict[str, str]:
    """Variants none of whose runs can continue (all diverged or failed for good)."""
    from ablate.studies.status import run_states

    states = run_states(store, [v.to_json() for v in runs])
    out = {}
    for n in names:
        mine = [s for s in states if s.name == n]
        if mine and all(s.state != "done" for s in mine):
            out[n] = "stage: every run " + "/".join(sorted({s.state for s in mine}))
    return out


def decided(decisions: list[dict[str, Any]], scale_winner: bool) -> bool:
    """The last stage's decision left one variant and the study does not scale it."""
    return bool(decisions) and not scale_winner and len(decisions[-1].get("kept", [])) == 1


def advance(study_path: Path | str, *, executor: str | None = None,
            profile: str | None = None, results: Path | str = "results",
            entry: str = "trainer:run") -> StageReport:
    """Decide every stage whose runs are all finished, promote the survivors, and submit what
    the current stage still needs. Call again (or `ablate sweep` again) after the runs end."""
    from ablate.studies.sweep import plan_sweep, run_sweep

    plan = plan_sweep(study_path, executor=executor, profile=profile, results=results)
    loaded, store = plan.loaded, plan.store
    spec = loaded.study.stages
    assert spec is not None
    budgets = all_budgets(loaded)
    names = list(dict.fromkeys(v.name for v in plan.variants))
    state = read_state(store.root) if store.root.exists() else {"budgets": [], "decisions": []}
    decisions = state["decisions"]
    promoted = False

    while store.variants_path.exists():
        k = len(decisions)
        stopped = {v for d in decisions for v in d.get("stopped", {})}
        active = [n for n in names if n not in stopped]
        runs = [v for v in plan.variants if v.name in active]
        if decided(decisions, spec.scale_winner):
            break  # one variant left: the winner is known
        if 0 < k < len(budgets):  # idempotent: also finishes one a crash interrupted
            with store.locked():
                _promote(store, [v.run_id for v in runs], budgets[k], k)
            promoted = True
        if k >= len(budgets) - 1 or not _stage_complete(store, runs, budgets[k],
                                                         loaded.study.max_attempts):
            break
        groups, levels = _fit_stage(store, active)
        dec = decide(groups, margin=spec.margin, baseline=spec.baseline, stage=k,
                     budget=budgets[k], dead=_dead(store, runs, active), levels=levels)
        decisions.append(dec.to_json())
        with store.locked():
            atomic_write(store.root / STATE_FILE,
                         json.dumps({"budgets": budgets, "decisions": decisions}, indent=1))
    if promoted:  # promotion turned done runs into pending ones: plan again
        plan = plan_sweep(study_path, executor=executor, profile=profile, results=results)

    k = len(decisions)
    stopped_at = stopped_variants(store.root) if decisions else {}
    if decided(decisions, spec.scale_winner):
        k = len(decisions) - 1  # the winner stays at the stage that decided it
    stage_of = {n: (budgets[stopped_at[n]["stage"]] if n in stopped_at else budgets[k])
                for n in names}
    todo = {v.run_id for v in plan.submit}
    plan.variants = [_stage_variant(v, stage_of[v.name]) for v in plan.variants]
    plan.submit = [v for v in plan.variants if v.name not in stopped_at and v.run_id in todo]
    for v in plan.variants:
        if v.name in stopped_at:
            plan.skipped[v.run_id] = f"stopped at stage {stopped_at[v.name]['stage']}"
    fresh = not (store.root / STATE_FILE).exists()
    out = run_sweep(plan, entry=entry)
    if fresh:
        atomic_write(store.root / STATE_FILE,
                     json.dumps({"budgets": budgets, "decisions": decisions}, indent=1))
    finished = decided(decisions, spec.scale_winner) or k >= len(budgets) - 1 and _stage_complete(
        store, [v for v in plan.variants if v.name not in stopped_at], budgets[-1],
        loaded.study.max_attempts)
    return StageReport(k, budgets, decisions, out["submitted"], out["skipped"], out["executor"],
                       out["study_dir"], finished)


def run_adaptive(study_path: Path | str, *, executor: str | None = None,
                 profile: str | None = None, results: Path | str = "results",
                 entry: str = "trainer:run", wait: bool = False,
                 show: bool = True) -> StageReport:
    """`advance`, and with `wait` keep going stage after stage until the study is finished or
    nothing more can run (runs failed for good)."""
    from ablate.studies.sweep import wait as wait_runs

    rep = advance(study_path, executor=executor, profile=profile, results=results, entry=entry)
    while wait and not rep.finished:
        wait_runs(Path(rep.study_dir), show=show)
        before = (rep.stage, len(rep.submitted))
        rep = advance(study_path, executor=executor, profile=profile, results=results,
                      entry=entry)
        if not rep.submitted and (rep.stage, 0) == (before[0], 0):
            break  # nothing new to run: stuck on failures (status says which)
    return rep


def has_stages(study_path: Path | str) -> bool:
    """Whether a study file is adaptive (has `stages:`); a file that does not load says no and
    lets the normal path report the error."""
    from ablate.studies.study import load_study

    try:
        return load_study(study_path).study.stages is not None
    except InputError:
        return False
