"""`ablate sweep STUDY --within 14d`: the study that fits the time and the nodes it has.

Why: a study is sized by its budget per run, its seeds and its nodes per run, and what a lab
has is a deadline and a share of a partition. The paper's study as shipped needs ~6 months
on the 2 nodes of sweeps/slurm_gpu.yaml (its dry run at 61c5b79), and nothing said so or offered what would fit.

What is searched (every number from the time plan, trainer/plan/time_plan.py, on the
profile's GPUs; the nodes from the executor that counts GPU nodes, launch/executor.py
GpuNodes: on Slurm the study's nodes, slurm.study_nodes or `sinfo`):
- budget per run, in GPU-hours (the trainer's `budget.gpu_hours`: the train loop's wall x
  devices held, the fit's x axis; what a run holds besides, for evals, checkpoints, job starts
  and requeues, is said beside it as the dry run plans it, GPUs held x wall): the
  paper's staged workflow (ScaleRL, arXiv 2510.13786): single-axis ablations at ~3.5k-4k GPU-hours,
  leave-one-out at 16k. Below the paper's stage only when nothing else fits, never under twice
  the fit window's start (fit.min_compute in GPU-hours, else the paper's 1.5k): a run must
  hold a fit window at least as long as what it leaves out;
- seeds, from MAX_USEFUL_SEEDS (more do not sharpen `ablate compare`'s verdict on A;
  ablate/analysis/resolution.py) down to 1: more seeds first, then the larger budget;
- nodes per run, 1 to the study's nodes: the one with the shortest study wall time (runs that
  fit the nodes at once, in waves; ties: the profile's own, then fewer).
The first (seeds, budget) whose best nodes per run fit the time is the proposal. It says what
margin on A it buys (ablate/analysis/resolution.py a_margin, with how that is derived), and
ablate/studies/proposal.py writes it as a study YAML that `ablate sweep` runs as is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Optional

from ablate.adapters import adapter_of
from ablate.analysis.resolution import MAX_USEFUL_SEEDS, a_margin
from ablate.errors import InputError
from ablate.studies import launch
from ablate.studies.capacity import Capacity, study_wall_h
from ablate.studies.design import LoadedStudy
from ablate.studies.expand import Variant
from ablate.studies.launch.executor import GpuNodes
from ablate.studies.launch.profile import Profile

# GPU-hours per run of the paper's stages (ScaleRL, arXiv 2510.13786: the staged workflow), largest first.
STAGE_BUDGETS = {"single-axis": (4000.0, 3500.0), "leave-one-out": (16000.0,)}
PAPER_WINDOW_START = 1500.0  # ScaleRL: the fit excludes the first ~1.5k GPU-hours
BELOW_STEPS = 8  # budgets tried between the paper's smallest and the floor
UNITS = {"m": 1 / 60, "min": 1 / 60, "h": 1.0, "d": 24.0, "w": 168.0}


def parse_within(text: str) -> float:
    """`14d`, `36h`, `2w`, `90min`, `1.5d` -> hours; one-line InputError otherwise."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(min|m|h|d|w)\s*", text or "")
    if not m or float(m.group(1)) <= 0:
        raise InputError(f"--within {text}: expected a duration with a unit, e.g. 14d, 36h, 2w "
                         "(min, h, d, w)")
    return float(m.group(1)) * UNITS[m.group(2)]


@dataclass
class Option:
    """One sizing of the study and what it costs."""

    budget: float  # GPU-hours a run
    seeds: int
    nodes_per_run: int
    runs: int
    run_wall_h: float  # the longest variant's
    study_wall_h: float
    run_gpu_hours: float  # held a run (GPUs held x wall, the dry run's GPU-h): the longest's
    study_gpu_hours: float  # held by every run of the study
    cap: Capacity
    margin: float  # on A (ablate/analysis/resolution.py)
    paper: bool  # the budget is one of the paper's stage's

    def to_json(self) -> dict:
        return {"budget_gpu_hours": self.budget, "seeds": self.seeds,
                "nodes_per_run": self.nodes_per_run, "runs": self.runs,
                "run_wall_h": round(self.run_wall_h, 1),
                "study_wall_h": round(self.study_wall_h, 1),
                "run_gpu_hours_held": round(self.run_gpu_hours, 1),
                "study_gpu_hours_held": round(self.study_gpu_hours, 1),
                "runs_at_once": self.cap.runs_at_once, "margin_A": round(self.margin, 4),
                "paper_stage_budget": self.paper}


@dataclass
class Sizing:
    """The search's outcome: the chosen option (None: nothing fits) and what it was among."""

    within_h: float
    stage: str
    variants: int
    nodes: Capacity  # the study's nodes (at the profile's nodes per run)
    chosen: Optional[Option] = None
    smallest: Optional[Option] = None  # 1 seed at the floor budget: what nothing-fits says
    paper_smallest: Optional[Option] = None  # 1 seed at the paper's smallest stage budget
    tried: list[Option] = field(default_factory=list)


def stage_of(loaded: LoadedStudy) -> str:
    return "leave-one-out" if loaded.study.mode == "leave_one_out" else "single-axis"


def floor_budget(loaded: LoadedStudy) -> float:
    """Twice the fit window's start: the smallest budget whose window is half the run."""
    f = loaded.study.fit
    start = f.min_compute if f.x == "gpu_hours" and f.min_compute else PAPER_WINDOW_START
    return 2.0 * start


def check_sizable(study_path: str, loaded: LoadedStudy, variants: list[Variant],
                  prof: Profile, executor: str) -> GpuNodes:
    """The executor that sizes the runs: --within plans GPU-hour budgets of the built-in
    trainer on the GPU nodes of an executor that counts them (launch.gpu_nodes: Slurm); one
    line if not."""
    sizer = launch.gpu_nodes(executor)
    named = sizer or launch.gpu_nodes()
    called = f"{named.CALLED} runs" if named else "runs in GPU nodes"
    why = None
    if sizer is None or not sizer.job_shape(prof).gpus_per_node:
        why = (f"it sizes {called} on GPUs (budgets in the paper's GPU-hours) and these go to "
               f"{executor}" + ("" if sizer is None else " without GPUs"))
    elif loaded.study.stages is not None:
        why = "it sizes a plain study; this one has `stages:` (adaptive)"
    elif any(adapter_of(v.config).time_plan is None for v in variants):
        why = "another trainer's runs have no time plan here"
    if why:
        use = (f"; use a profile with {named.key('gpus_per_node')} (e.g. --profile "
               f"{named.GPU_PROFILE})" if named else "")
        raise InputError(f"{study_path}: --within: {why}{use}")
    return sizer


def run_walls(sizer: GpuNodes, variants: list[Variant], prof: Profile, budget: float,
              nodes: int) -> tuple[Optional[list[float]], str]:
    """(wall hours of each variant, one seed, at `budget` GPU-hours on `nodes` nodes a run,
    ""), or (None, why the first that cannot run there cannot: the trainer refuses the shape,
    its memory plan does not fit, or its time plan cannot reach the budget under the
    profile's limits)."""
    plans, why = run_plans(sizer, variants, prof, budget, nodes)
    return (None if plans is None else [t.wall_h for t in plans]), why


def run_plans(sizer: GpuNodes, variants: list[Variant], prof: Profile, budget: float,
              nodes: int) -> tuple[Optional[list], str]:
    """run_walls' time plans (trainer/plan/time_jobs.py TimePlan: wall_h, gpu_hours held)."""
    from ablate.studies.sweep import stage_variant

    shape = replace(sizer.job_shape(prof), nodes=nodes)
    limits, plans = sizer.limits(prof), []
    for v in {v.name: v for v in variants}.values():
        c = stage_variant(v, {"gpu_hours": budget}).config
        adapter = adapter_of(c)  # a trainer with a time plan here (check_sizable)
        found = adapter.problems(c, shape)
        if found or adapter.memory_plan(c, shape).fits is False:
            return None, f"variant {v.name}: " + (found[0] if found else "its memory plan "
                                                  "does not fit")
        t = adapter.time_plan(c, shape, limits)
        if t.wall_h is None or t.reaches_budget is False:
            return None, f"variant {v.name}: {t.problem or t.note}"
        plans.append(t)
    return plans, ""


def best_option(sizer: GpuNodes, variants: list[Variant], prof: Profile, budget: float,
                seeds: int, paper: bool, cache: dict) -> Optional[Option]:
    """The nodes per run that finish `seeds` seeds of every variant at `budget` soonest."""
    best = None
    own = sizer.nodes_per_run(prof)
    for n in range(1, sizer.study_nodes(prof).nodes + 1):
        if (budget, n) not in cache:
            cache[(budget, n)] = run_plans(sizer, variants, prof, budget, n)
        plans = cache[(budget, n)][0]
        cap = sizer.nodes_capacity(prof, nodes_per_run=n, array_cap=None)
        if plans is None or cap.runs_at_once < 1:
            continue
        walls = [t.wall_h for t in plans]
        wall = study_wall_h(walls * seeds, cap.runs_at_once)
        key = (wall, n != own, n)
        if best is None or key < best[0]:
            held = [t.gpu_hours for t in plans]
            best = (key, Option(budget, seeds, n, len(walls) * seeds, max(walls), wall,
                                max(held), sum(held) * seeds, cap, a_margin(seeds), paper))
    return best[1] if best else None


def budgets(loaded: LoadedStudy) -> list[tuple[float, bool]]:
    """(GPU-hours, a paper stage budget?) to try: the stage's, then below it to the floor."""
    stage = STAGE_BUDGETS[stage_of(loaded)]
    low, floor = min(stage), floor_budget(loaded)
    below = [low - i * (low - floor) / BELOW_STEPS for i in range(1, BELOW_STEPS + 1)]
    return [(b, True) for b in stage] + [(round(b), False) for b in below if b < low]


def size_study(sizer: GpuNodes, loaded: LoadedStudy, variants: list[Variant], prof: Profile,
               within_h: float) -> Sizing:
    """Search as the module doc says, on `sizer`'s nodes (check_sizable's); `variants` are
    the study's (any seeds)."""
    one_seed = list({v.name: v for v in variants}.values())
    out = Sizing(within_h, stage_of(loaded), len(one_seed), sizer.capacity(prof))
    cache: dict = {}
    sizes = budgets(loaded)
    for seeds in range(MAX_USEFUL_SEEDS, 0, -1):
        for budget, paper in sizes:
            if not paper and (seeds > 1 or out.chosen is not None):
                continue  # below the paper's budget: one seed only, as a last resort
            opt = best_option(sizer, one_seed, prof, budget, seeds, paper, cache)
            if opt is None:
                continue
            out.tried.append(opt)
            if out.chosen is None and opt.study_wall_h <= within_h:
                out.chosen = opt
    ones = [o for o in out.tried if o.seeds == 1]
    out.smallest = min(ones, key=lambda o: o.budget, default=None)
    out.paper_smallest = min((o for o in ones if o.paper), key=lambda o: o.budget, default=None)
    return out


def nodes_for(sizer: GpuNodes, variants: list[Variant], prof: Profile, within_h: float,
              budget: float, up_to: int = 64) -> Optional[int]:
    """The fewest study nodes (Slurm's `slurm.study_nodes`, up to `up_to`) on which one seed
    of every variant at `budget` GPU-hours fits `within_h`; None when not even `up_to` do."""
    one_seed = list({v.name: v for v in variants}.values())
    cache: dict = {}
    for n in range(1, up_to + 1):
        more = sizer.with_study_nodes(prof, n)
        opt = best_option(sizer, one_seed, more, budget, 1, True, cache)
        if opt is not None and opt.study_wall_h <= within_h:
            return n
    return None


def with_seeds(opt: Option, seeds: list[int]) -> list[int]:
    """The proposal's seeds: the study's own first, then the next integers."""
    out = list(seeds)[:opt.seeds]
    nxt = max(seeds, default=-1) + 1
    while len(out) < opt.seeds:
        out.append(nxt)
        nxt += 1
    return out
