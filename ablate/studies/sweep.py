"""`ablate sweep`: validate everything, then submit only what still needs to run.

Planning reads and checks (study, expansion, profile, executor, existing run states) and
writes nothing, so bad input leaves no trace: `load_sweep` checks the inputs (and, unless
forced, that every run fits the profile's GPU memory and can reach its budget under its time
limit and requeues: check_plans, where `sweep --dry-run` exits 2 too), `choose_runs` picks
the runs to submit. Submitting (`run_sweep`) writes the study dir, submits the runs
that are not done and not queued/running (failed ones until `max_attempts`), records the job
ids, and returns; ablate.studies.status.wait_for_runs waits for those who ask. An adaptive
study (ablate.studies.adaptive) goes through the same three functions at every stage.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional, Sequence

from ablate.adapters import adapter_of, fit_columns, memory_plan, time_plan, topology
from ablate.adapters.builtin import JobShape, Limits, advice
from ablate.errors import InputError
from ablate.studies import launch
from ablate.studies.entry import TRAINER_ENTRY
from ablate.studies.expand import Variant, expand
from ablate.studies.fitcheck import check_fit_columns
from ablate.studies.gpu_need import check_gpus
from ablate.studies.launch.executor import RunResources
from ablate.studies.launch.profile import Profile, find_profile, load_profile
from ablate.studies.stagespec import check_baseline, check_stages
from ablate.studies.status import run_states
from ablate.study_record import StudyRecord
from ablate.studydir import StudyStore, study_dir_for
from ablate.studies.study import LoadedStudy, load_study

# never ran to a verdict, or the user cancelled or stopped it (a stop resumes from its checkpoint)
RESUBMIT_ALWAYS = ("pending", "cancelled", "stopped")
RESUBMIT_BOUNDED = ("failed", "interrupted")  # up to the study's max_attempts


@dataclass
class SweepPlan:
    loaded: LoadedStudy
    variants: list[Variant]
    profile: Profile
    executor: str
    store: StudyStore
    submit: list[Variant] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # run_id -> why


def loaded_study(study: Path | str | LoadedStudy, overrides: Sequence[str] = ()) -> LoadedStudy:
    """The study loaded (ablate.studies.study.load_study), or as the caller already loaded it:
    `ablate sweep` loads the file once and hands the result on."""
    if isinstance(study, LoadedStudy):
        return study
    return load_study(study, overrides)


def check_inputs(study: Path | str | LoadedStudy, *, executor: Optional[str] = None,
                 profile: Optional[str] = None, overrides: Sequence[str] = (),
                 force: bool = False) -> tuple[LoadedStudy, list[Variant], Profile]:
    """Load (unless loaded) and check the study, its expansion, the profile and the executor
    name (shared by `sweep` and `sweep --dry-run`, so both reject the same input: a GPU recipe
    whose Slurm jobs would get no GPUs too, unless `force`); writes nothing."""
    loaded = loaded_study(study, overrides)
    study_path = loaded.path
    check_fit_columns(loaded)  # a fit column the trainer never logs: refused before training
    check_stages(loaded)
    variants = expand(loaded)
    check_baseline(loaded, variants)
    ref = profile or loaded.study.profile
    where = "--profile" if profile else loaded.doc.where(("profile",))
    prof = load_profile(find_profile(ref, Path(study_path).parent, where)) if ref else Profile()
    if executor is not None:
        launch.check_executor(executor)
    ex = intended_executor(executor, prof)  # one executor decides the shape and both plans
    check_variants(study_path, variants, prof.job_shape(ex))
    if not force:
        check_gpus(study_path, variants, prof, ex, ref)
    return loaded, variants, prof


def check_variants(study_path: Path | str, variants: list[Variant], shape: JobShape) -> None:
    """Refuse a variant the trainer would refuse at start (its adapter's `problems`: for the
    built-in trainer, trainer/validate.py), on the job shape the profile asks for: one line
    naming the variant, the keys and a fix."""
    for v in variants:
        found = adapter_of(v.config).problems(v.config, shape)
        if found:
            raise InputError(f"{study_path}: variant {v.name} (seed {v.seed}): {found[0]}")


def resource_plans(variants: list[Variant], shape: JobShape) -> dict[str, Any]:
    """run_id -> trainer.plan.memory.Plan, or a NoPlan where the trainer has no memory plan
    (ablate/adapters memory_plan); computed once per distinct config, seeds share it."""
    by_name: dict[str, Any] = {}
    for v in variants:
        if v.name not in by_name:
            by_name[v.name] = memory_plan(v.config, shape)
    return {v.run_id: by_name[v.name] for v in variants}


def time_plans(variants: list[Variant], shape: JobShape, limits: Limits) -> dict[str, Any]:
    """run_id -> trainer.plan.time_plan.TimePlan, or None where the trainer has no time plan
    (it sizes itself); computed once per distinct config, as the memory plans."""
    by_name: dict[str, Any] = {}
    for v in variants:
        if v.name not in by_name:
            by_name[v.name] = time_plan(v.config, shape, limits)
    return {v.run_id: by_name[v.name] for v in variants}


def resources_of(config: Any, run_dir: Path, shape: JobShape, limits: Limits) -> RunResources:
    """What one run's job needs on the executor's `shape` and `limits`, from its trainer's
    plans (none for another trainer): its ranks per node and its engines' cores (topology),
    its restarts after time limits (time plan). Computed here, once, and handed to `submit`."""
    topo = topology(config, shape)
    t = time_plan(config, shape, limits)
    return RunResources(
        run_dir, ranks_per_node=topo.shape.ranks_per_node if topo is not None else None,
        engine_cores=sum(1 + max(1, len(gpus)) for gpus in topo.engines) if topo is not None
        else 0, requeues=t.max_num_timeout if t is not None else None,
        engine_nodes=topo is not None and topo.roles)


def check_time(study_path: Path | str, variants: list[Variant], shape: JobShape,
               limits: Limits) -> None:
    """Refuse to submit a study with a variant whose time plan cannot reach its budget under
    the profile (an eval longer than a job, more requeues than max_num_timeout, a job that
    keeps no step); `--force` skips this. One line: which variant, why, what to change."""
    plans = time_plans(variants, shape, limits)
    for v in variants:
        t = plans[v.run_id]
        if t is not None and t.reaches_budget is False:
            raise InputError(
                f"{study_path}: variant {v.name} cannot reach its budget under this profile: "
                f"{t.problem} (`ablate sweep --dry-run` shows the time plan; --force submits "
                "anyway)")


def check_fit(study_path: Path | str, variants: list[Variant], shape: JobShape) -> None:
    """Refuse to submit a study with a variant whose plan exceeds the profile's GPU memory
    (`--force` skips this): one line, which variant, which term, what to change."""
    plans = resource_plans(variants, shape)
    for v in variants:
        p = plans[v.run_id]
        if p.fits is False:
            what = (f"{p.train_gib_per_gpu:g} GiB per training GPU (budget "
                    f"{p.train_budget_gib:g}), largest term {p.largest} {p.train[p.largest]:g} GiB"
                    if p.train_gib_per_gpu > p.train_budget_gib
                    else f"generation GPU: {p.kv_sequences}")
            if p.generation_where.startswith("training GPUs (shared)"):
                what += f" (vLLM reserves {p.gpu_gib - p.train_budget_gib:g} GiB of each)"
            raise InputError(
                f"{study_path}: variant {v.name} does not fit {p.gpu_gib:g} GiB GPUs: {what}; "
                f"{advice(v.config, p)} (`ablate sweep --dry-run` shows the plan; --force "
                "submits anyway)")


def check_plans(study_path: Path | str, variants: list[Variant], prof: Profile,
                executor: Optional[str]) -> None:
    """What `sweep` refuses past its inputs, one line (InputError, exit 2): a variant whose
    memory plan does not fit the profile's GPUs (check_fit), then one whose time plan cannot
    reach its budget (check_time). The one rule for both: `sweep` refuses before it writes
    anything, `sweep --dry-run` exits 2 on it after showing the plans (ablate/cli/dryrun.py);
    `--force` skips it in both."""
    ex = intended_executor(executor, prof)  # the shape and the limits of the same executor
    check_fit(study_path, variants, prof.job_shape(ex))
    check_time(study_path, variants, prof.job_shape(ex), prof.limits(ex))


def plan_sweep(study: Path | str | LoadedStudy, *, executor: Optional[str] = None,
               overrides: Sequence[str] = (),
               profile: Optional[str] = None, results: Path | str = "results",
               force: bool = False) -> SweepPlan:
    """Everything `sweep` will do, decided without writing anything. `force`: submit even
    variants whose resource plan does not fit the profile's GPUs."""
    return choose_runs(load_sweep(study, executor=executor, overrides=overrides,
                                  profile=profile, results=results, force=force))


def load_sweep(study: Path | str | LoadedStudy, *, executor: Optional[str] = None,
               overrides: Sequence[str] = (),
               profile: Optional[str] = None, results: Path | str = "results",
               force: bool = False) -> SweepPlan:
    """The checked inputs of a sweep (study, expansion, profile, executor, study dir), with no
    run chosen yet; writes nothing."""
    loaded, variants, prof = check_inputs(study, executor=executor, profile=profile,
                                          overrides=overrides, force=force)
    if not force:
        check_plans(loaded.path, variants, prof, executor)
    store = StudyStore(study_dir_for(Path(results), loaded.study.name))
    return SweepPlan(loaded, variants, prof, launch.choose_executor(executor, prof), store)


def intended_executor(requested: Optional[str], prof: Profile) -> str:
    """The executor the runs would go to (launch.choose_executor's choice, without its check
    that it works here): --executor, else the profile's, else slurm where `sinfo` answers."""
    return executor_reason(requested, prof)[0]


def executor_reason(requested: Optional[str], prof: Profile) -> tuple[str, str]:
    """(executor, why that one) as launch.choose_executor picks it (launch.pick, the one
    rule); says when it would not work here (the dry run shows it; `sweep` refuses it)."""
    return launch.pick(requested, prof)


def choose_runs(plan: SweepPlan, *,
                budget_of: Optional[Callable[[Variant], dict[str, float]]] = None,
                stopped: Mapping[str, str] = {}) -> SweepPlan:
    """The plan with its runs chosen from their states on disk: not done and not queued or
    running (failed ones until `max_attempts`) are submitted, the rest skipped with why.
    Adaptive studies: `budget_of` gives a variant the budget of its current stage (same run
    id), and variants named in `stopped` are skipped with the reason given."""
    variants = plan.variants if budget_of is None else [
        stage_variant(v, budget_of(v)) for v in plan.variants]
    out = replace(plan, variants=variants, submit=[], skipped={})
    max_attempts = plan.loaded.study.max_attempts
    states = {s.run_id: s for s in run_states(plan.store, [v.to_json() for v in variants])}
    for v in variants:
        st = states[v.run_id]
        if v.name in stopped:
            out.skipped[v.run_id] = stopped[v.name]
        elif st.state in RESUBMIT_ALWAYS or (
                st.state in RESUBMIT_BOUNDED and st.attempts < max_attempts):
            out.submit.append(v)
        else:
            why = st.state
            if st.state in RESUBMIT_BOUNDED:
                why += f" after {st.attempts} attempts (max_attempts={max_attempts})"
            out.skipped[v.run_id] = why
    return out


def stage_variant(v: Variant, budget: dict[str, float]) -> Variant:
    """The same run (same id) configured for one stage's budget."""
    cfg = v.config.model_copy(update={"budget": type(v.config.budget).model_validate(budget)})
    return replace(v, config=cfg)


def study_text(loaded: LoadedStudy) -> str:
    """The study file as submitted, plus the `--override`s it ran with (as comments), so the
    study dir says what was asked; variants.json and each config.yaml hold the result."""
    text = loaded.path.read_text()
    if loaded.cli_overrides:
        text += ("\n# ablate sweep --override (applied on top of everything above):\n"
                 + "".join(f"#   {o}\n" for o in loaded.cli_overrides))
    return text


def study_record(loaded: LoadedStudy) -> StudyRecord:
    """The study as resolved (study.json, ablate/study_record.py): what every reader of the
    study dir reads. The fit is the validated `fit:` with the trainer's default columns filled
    in by its adapter (`fit_columns`), from the keys the file sets."""
    study = loaded.study
    trainer = study.trainer.model_dump(mode="json")
    written = {k: getattr(study.fit, k) for k in study.fit.model_fields_set
               if getattr(study.fit, k) is not None}
    return StudyRecord(name=study.name, description=study.description, base=study.base,
                       trainer=trainer, fit=fit_columns(trainer, written),
                       stages=None if study.stages is None else study.stages.model_dump(mode="json"),
                       cli_overrides=list(loaded.cli_overrides))


def run_sweep(plan: SweepPlan, *, entry: str = TRAINER_ENTRY) -> dict[str, Any]:
    """Write the study dir, submit, record. Returns the `sweep --json` object."""
    store = plan.store
    fresh = [d for d in (store.root.parent, store.root) if not d.exists()]
    try:
        with store.locked():
            undo = store.write_study(study_text(plan.loaded), study_record(plan.loaded),
                                     plan.variants,
                                     frozenset(v.run_id for v in plan.submit))
            shape = plan.profile.job_shape(plan.executor)
            limits = plan.profile.limits(plan.executor)
            runs = [resources_of(v.config, store.run_dir(v.run_id), shape, limits)
                    for v in plan.submit]
            try:
                jobs = launch.submit(plan.executor, runs, store.submitit_dir, plan.profile,
                                     entry=entry, job_name=f"ablate-{plan.loaded.study.name}")
            except InputError:  # the scheduler refused the profile: leave nothing behind
                undo()
                raise
            store.record_submissions(jobs, plan.executor)
    except InputError:
        for d in reversed(fresh):  # folders this call created, with the lock and submitit files
            shutil.rmtree(d, ignore_errors=True)
        raise
    return {
        "submitted": [v.run_id for v in plan.submit],
        "skipped": list(plan.skipped),
        "executor": plan.executor,
        "study_dir": str(store.root),
    }
