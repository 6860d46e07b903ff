"""Adaptive studies: spend compute on the variants that can still win.

A study with `stages:` (ablate.studies.stagespec) runs every variant to the first stage budget;
then each variant is fitted (its seeds pooled, the study's `fit:` window) and the ones that
cannot win stop (the rules: ablate.studies.stage_rules). Survivors continue from their
checkpoints to the next budget, and the last stage is the study's `budget`.

One loop, over the same plan and submit functions as a plain sweep (ablate.studies.sweep):

    decide (every stage whose runs all ended) -> promote (survivors to the next budget)
    -> plan (choose_runs, each variant at its stage's budget) -> submit (run_sweep)
    -> wait (ablate.studies.status.wait_for_runs, with `--wait`) -> decide ...

State lives in files, so an interrupted study is resumed by rerunning `ablate sweep`:
stages.json (ablate.studydir) holds the budgets and one decision per finished stage.

A run's id is the hash of its config at the study's final budget, so an adaptive study's runs
are exactly the full-grid study's runs; its `config.yaml` holds the budget of its current
stage. Promoting a run rewrites that budget, marks its status `pending` (the trainer resumes a
done run with a larger budget from its checkpoint) and starts its submission record afresh.
The decision is written before any run is promoted, and promotion is idempotent, so a crash
in between is repaired by the next `ablate sweep`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import yaml

from ablate.analysis.pipeline import Options, common_window, fit_all
from ablate.studies.entry import TRAINER_ENTRY
from ablate.studies.expand import Variant
from ablate.studies.launch.job import set_state
from ablate.studies.stage_rules import decide, departed_variants, score_levels
from ablate.studies.stagespec import all_budgets
from ablate.studies.status import run_states
from ablate.studies.study import LoadedStudy
from ablate.studies.sweep import (RESUBMIT_BOUNDED, SweepPlan, choose_runs, load_sweep,
                                  loaded_study, run_sweep)
from ablate.studydir import StudyStore, stopped_in
from trainer import rundir

if TYPE_CHECKING:
    from ablate.analysis.variant_fits import GroupFit

__all__ = ["StageReport", "advance", "decided", "promote", "run_adaptive"]


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


# ---------------------------------------------------------------------------------------------
# A run's budget on disk.


def run_budget(run_dir: Path) -> Optional[dict[str, Any]]:
    """The budget the run's config.yaml trains to (None when there is no readable config)."""
    try:
        return rundir.read_config(run_dir).get("budget")
    except (OSError, ValueError, yaml.YAMLError):
        return None


def reaches(budget: Optional[dict[str, Any]], target: dict[str, float]) -> bool:
    """True when a run configured with `budget` trains at least to `target`."""
    if not budget:
        return False
    (kind, val), = target.items()
    got = budget.get(kind)
    return got is not None and float(got) >= val


def promote(store: StudyStore, run_ids: list[str], budget: dict[str, float], stage: int) -> None:
    """Point survivors' runs at the next budget so the next submission continues them.
    Idempotent: a run whose config already reaches `budget` is left alone (the config is
    rewritten last)."""
    todo = [rid for rid in run_ids if store.run_dir(rid).joinpath(rundir.CONFIG).exists()
            and not reaches(run_budget(store.run_dir(rid)), budget)]
    store.restart_submissions(todo, stage - 1)  # attempts count per stage; old jobs are kept
    for rid in todo:
        d = store.run_dir(rid)
        cfg = rundir.read_config(d)
        status = rundir.read_status(d)
        if status.get("state") == rundir.RunState.DONE:
            # The trainer's progress is a share of the old budget: restate it against the new
            # one, so status shows how far the promoted run is rather than 100%.
            (kind, new), = budget.items()
            old = (cfg.get("budget") or {}).get(kind)
            share = ({"progress": round(status["progress"] * float(old) / new, 4)}
                     if old and status.get("progress") is not None else {})
            set_state(d, rundir.RunState.PENDING, stage=stage, **share)
        cfg["budget"] = dict(budget)
        rundir.write_config(d, cfg)


# ---------------------------------------------------------------------------------------------
# Deciding a stage.


def stage_complete(store: StudyStore, runs: list[Variant], budget: dict[str, float],
                   max_attempts: int) -> bool:
    """Every run ended at this budget: done there, diverged, or failed for good."""
    for st in run_states(store, [v.to_json() for v in runs]):
        if st.state == rundir.RunState.DIVERGED or (
                st.state == rundir.RunState.DONE
                and reaches(run_budget(store.run_dir(st.run_id)), budget)):
            continue
        if st.state in RESUBMIT_BOUNDED and st.attempts >= max_attempts:
            continue  # failed for good: the sweep will not resubmit it
        return False
    return True


def fit_stage(store: StudyStore, names: list[str]
              ) -> tuple[list[GroupFit], dict[str, tuple[float, float]]]:
    """Each variant's fit, and its observed (best, recent) score for the collapse rule. The
    fits come from the pipeline `compare` uses (ablate.analysis.pipeline): the stage's variants
    share one window, so a stop is decided on the same spans compare ranks."""
    # pandas, scipy (1 s to import): only when a stage is decided, not on every `ablate sweep`
    from ablate.analysis.sources import load
    from ablate.analysis.variant_fits import GroupFit

    curves = load(store.root)
    frame = curves.frame[curves.frame["variant"].isin(names)]
    curves = replace(curves, frame=frame)
    opts = Options()
    got = {g.variant: g for g in fit_all(curves, opts, common_window(curves, opts))} \
        if len(frame) else {}
    return ([got.get(n) or GroupFit(n, None, f"variant {n!r}: no evaluation points yet", 0)
             for n in names], score_levels(frame) if len(frame) else {})


def dead_variants(store: StudyStore, runs: list[Variant], names: list[str]) -> dict[str, str]:
    """Variants none of whose runs can continue (all diverged or failed for good)."""
    states = run_states(store, [v.to_json() for v in runs])
    out = {}
    for n in names:
        mine = [s for s in states if s.name == n]
        if mine and all(s.state != rundir.RunState.DONE for s in mine):
            out[n] = "stage: every run " + "/".join(sorted({s.state for s in mine}))
    return out


def decided(decisions: list[dict[str, Any]], scale_winner: bool) -> bool:
    """The last stage's decision left one variant and the study does not scale it."""
    return bool(decisions) and not scale_winner and len(decisions[-1].get("kept", [])) == 1


def decide_and_promote(plan: SweepPlan, budgets: list[dict[str, float]]) -> list[dict[str, Any]]:
    """Decide every stage whose runs all ended (written to stages.json), promoting the
    survivors of each decided stage to the next budget; returns all decisions so far."""
    store, spec = plan.store, plan.loaded.study.stages
    assert spec is not None
    names = list(dict.fromkeys(v.name for v in plan.variants))
    decisions = store.stages()["decisions"]
    while store.variants_path.exists() and not decided(decisions, spec.scale_winner):
        k = len(decisions)
        active = [n for n in names if n not in stopped_in(decisions)]
        runs = [v for v in plan.variants if v.name in active]
        if 0 < k < len(budgets):  # idempotent: also finishes one a crash interrupted
            with store.locked():
                promote(store, [v.run_id for v in runs], budgets[k], k)
        if k >= len(budgets) - 1 or not stage_complete(store, runs, budgets[k],
                                                       plan.loaded.study.max_attempts):
            break
        groups, levels = fit_stage(store, active)
        departed = None
        if spec.stop_departed:  # opt in: runs that fell off their frozen forecast
            from ablate.analysis.sources import load

            frame = load(store.root).frame
            departed = departed_variants(frame[frame["variant"].isin(active)])
        dec = decide(groups, margin=spec.margin, baseline=spec.baseline, stage=k,
                     budget=budgets[k], dead=dead_variants(store, runs, active), levels=levels,
                     departed=departed)
        decisions.append(dec.to_json())
        with store.locked():
            store.write_stages(budgets, decisions)
    return decisions


# ---------------------------------------------------------------------------------------------
# The loop.


def advance(study: Path | str | LoadedStudy, *, executor: str | None = None,
            profile: str | None = None, results: Path | str = "results",
            entry: str = TRAINER_ENTRY) -> StageReport:
    """One turn of the loop: decide the stages whose runs all ended, promote the survivors,
    plan each variant at its stage's budget and submit what that stage still needs."""
    base = load_sweep(study, executor=executor, profile=profile, results=results)
    spec, store = base.loaded.study.stages, base.store
    assert spec is not None
    budgets = all_budgets(base.loaded)
    decisions = decide_and_promote(base, budgets)
    stopped = stopped_in(decisions)
    k = len(decisions) - 1 if decided(decisions, spec.scale_winner) else len(decisions)
    # The winner stays at the stage that decided it; a stopped variant at its own stage.
    plan = choose_runs(base, budget_of=lambda v: budgets[stopped[v.name]["stage"]
                                                         if v.name in stopped else k],
                       stopped={n: f"stopped at stage {w['stage']}" for n, w in stopped.items()})
    fresh = not store.stages_path.exists()
    out = run_sweep(plan, entry=entry)
    if fresh:
        store.write_stages(budgets, decisions)
    finished = decided(decisions, spec.scale_winner) or k >= len(budgets) - 1 and stage_complete(
        store, [v for v in plan.variants if v.name not in stopped], budgets[-1],
        base.loaded.study.max_attempts)
    return StageReport(k, budgets, decisions, out["submitted"], out["skipped"], out["executor"],
                       out["study_dir"], finished)


def run_adaptive(study: Path | str | LoadedStudy, *, executor: str | None = None,
                 profile: str | None = None, results: Path | str = "results",
                 entry: str = TRAINER_ENTRY,
                 wait_for: Optional[Callable[[Path], object]] = None) -> StageReport:
    """The adaptive loop: `advance`, and with `wait_for` (a function that returns when the
    study's runs have ended, e.g. ablate.studies.status.wait_for_runs) wait and advance again,
    stage after stage, until the study is finished or nothing more can run (runs failed for
    good). Without it, one turn: rerunning `ablate sweep` takes the next."""
    loaded = loaded_study(study)  # loaded once, for every turn
    rep = advance(loaded, executor=executor, profile=profile, results=results, entry=entry)
    while wait_for is not None and not rep.finished:
        wait_for(Path(rep.study_dir))
        stage = rep.stage
        rep = advance(loaded, executor=executor, profile=profile, results=results,
                      entry=entry)
        if not rep.submitted and rep.stage == stage:
            break  # nothing new to run: stuck on failures (status says which)
    return rep
