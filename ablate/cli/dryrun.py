"""`ablate sweep --dry-run`: where the runs would go, the runs a study expands to, and each
one's GPU memory plan and time plan.

The plans are what a cluster user needs before queueing for hours: per variant, GiB per
training GPU by term and per generation GPU (trainer/plan/memory.py) against the profile's
`gpu_memory_gib`; and the time of a step, of an eval, to the budget (wall and GPU-hours) and
the jobs/requeues that takes under the profile's time limit (trainer/plan/time_plan.py). The same
checks refuse the study in `ablate sweep` (ablate/studies/sweep.py check_fit, check_time).
The runs' table is laid out for the terminal (ablate/cli/tables.py): the name last and whole
(a long multi-axis one breaks after an `axis=value,` at most), the least important columns
left out and named when the width cannot hold them, one line a run (for grep); prose folds at
words and commands at arguments (with `\\`), all at the width of ablate/cli/width.py (100 when
piped). A plan on CPU speaks of CPUs: RAM per training process, CPU-hours.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Optional

from ablate.cli.width import columns, fold
from ablate.number_text import count
from ablate.studies.expand import Variant
from ablate.studies.launch.profile import Profile
from ablate.adapters.builtin import JobShape, TimePlan, dur


def _terms(terms: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in terms.items())


def shape_text(shape: JobShape, cpu: bool = False) -> str:
    ranks = ("one rank per training GPU" if shape.ranks_auto
             else count(shape.ranks_per_node, "rank"))
    if cpu:
        return f"{count(shape.nodes, 'node')} x {ranks}, on CPU"
    gpus = ("GPUs not known here" if shape.gpus_per_node is None
            else f"{shape.gpus_per_node} GPUs" if shape.gpus_per_node else "no GPUs")
    mem = f" of {shape.gpu_memory_gib:g} GiB" if shape.gpu_memory_gib else ""
    return f"{count(shape.nodes, 'node')} x {ranks}, {gpus}{mem} per node"


def plan_lines(name: str, p: Any) -> list[str]:
    """Two or three plain lines for one variant's memory plan."""
    if p.train_gib_per_gpu is None:
        return [f"{name}: {p.note}"]
    verdict = ("" if p.fits is None else f" of {p.train_budget_gib:g} -> "
               + ("fits" if p.fits else "DOES NOT FIT"))
    per = "GiB of RAM per process" if p.device == "CPU" else "GiB/GPU"
    lines = [f"{name}: {p.model} ({p.params_b:g}B params), {count(p.dp, 'training rank')}, "
             f"{p.tokens_per_forward:,} tokens per forward/backward",
             f"  training {per} {p.train_gib_per_gpu:g}{verdict}; largest: {p.largest}; "
             f"{_terms(p.train)}",
             f"  generation ({p.generation_where}) {per} {p.generation_gib_per_gpu:g}: "
             f"{_terms(p.generation)}" + (f" ({p.kv_sequences})" if p.kv_sequences else "")]
    if p.note:
        lines.append(f"  {p.note}")
    return lines


def time_lines(t: Optional[TimePlan]) -> list[str]:
    """The time plan of one variant: a step, an eval, to the budget, jobs; then what stops
    it, warnings and the assumptions behind the numbers."""
    if t is None:
        return []
    if t.step_s is None:
        return [f"  time: {t.note}"]
    eval_how = "blocks training" if t.eval_blocks_training else "beside training"
    lines = [f"  time on {t.device}: step {dur(t.step_s)} (generation {dur(t.generation_s)} at "
             f"{t.generation_tokens_per_s:,.0f} tokens/s, training {dur(t.train_s)}; "
             f"{t.overlap}); eval {dur(t.eval_s)} ({eval_how}); checkpoint {dur(t.checkpoint_s)}"]
    if t.steps is None:
        lines.append(f"  {t.note}")
        return lines
    dev = _device(t)
    to = (f"  to the budget: {t.steps:,} steps, {t.evals} evals: {_hours(t.wall_h)} h wall, "
          f"{_hours(t.gpu_hours)} {dev}-hours ({count(t.devices, dev)} held)")
    if t.job_h is not None:
        limit = (f"max {t.max_requeues}" if t.max_requeues is not None else
                 f"max_num_timeout auto: {t.max_num_timeout}" if t.max_num_timeout is not None
                 else "no limit")
        jobs = ("no job keeps a step" if t.jobs is None else
                f"all {t.steps:,} steps in one job, no requeue needed ({limit})" if t.jobs == 1
                else f"{t.steps_per_job:,} steps kept per job -> {t.jobs} jobs, "
                f"{count(t.requeues, 'requeue')} needed ({limit})")
        to += f"; jobs of {t.job_h:g} h: {jobs}"
    lines.append(to)
    if t.basis != "assumed":
        lines.append(f"  planned from the rates {t.basis} (runs not started re-planned)")
    lines += range_lines(t)
    lines += wall_parts_lines(t)
    if t.reaches_budget is False:
        lines.append(f"  CANNOT REACH THE BUDGET: {t.problem}")
    lines += [f"  warning: {w}" for w in t.warnings]
    if t.assumptions:
        lines.append(f"  assumed: {'; '.join(t.assumptions)}")
    return lines


def range_lines(t: TimePlan) -> list[str]:
    """Before any run has measured: the plan's range over the uncertain constants, and the
    one that sets the step (trainer/plan/time_plan.py plan_range)."""
    r = t.range
    if not r or not r.get("step_s"):
        return []

    def span(key: str, f) -> str:
        lo, hi = r[key]
        return f(lo) if f(lo) == f(hi) else f"{f(lo)}-{f(hi)}"
    dev = _device(t)
    parts = [f"step {span('step_s', dur)}"]
    if r.get("steps"):
        parts.append(f"{span('steps', lambda x: f'{x:,}')} steps")
    if r.get("wall_h"):
        parts += [f"{span('wall_h', _hours)} h wall", f"{span('gpu_hours', _hours)} {dev}-h"]
    return [f"  range until a run measures: {', '.join(parts)} ({'; '.join(r['constants'])});"
            f" the step is set by {r['sets_step']}"]


# The one setting that cuts each part of a run's wall that is not its steps.
_CUTS = {"evals": "fewer or smaller evals (eval.every_steps, eval.num_prompts, eval.samples_per_prompt)",
         "checkpoints": "fewer checkpoints (checkpoint.every_steps)",
         "job starts": "longer jobs (slurm.time_min): fewer starts",
         "refills": "longer jobs (slurm.time_min): fewer pipeline refills after a start",
         "job ends": "longer jobs (slurm.time_min): fewer job ends, each losing a tail"}


def wall_parts_lines(t: TimePlan) -> list[str]:
    """The wall to the budget in parts that sum to it, and what would cut the largest part
    beside the steps."""
    parts = t.wall_parts_h
    if not parts or not t.wall_h:
        return []
    shown = ", ".join(f"{k} {_hours(v)} h" for k, v in parts.items() if k == "steps" or v >= 0.005 * t.wall_h)
    waste = max((k for k in parts if k != "steps"), key=lambda k: parts[k])
    cut = (f"; the largest beside the steps is {waste} ({parts[waste] / t.wall_h:.0%} of the "
           f"wall): {_CUTS[waste]}" if parts[waste] >= 0.05 * t.wall_h else "")
    return [f"  wall in parts: {shown} = {_hours(t.wall_h)} h{cut}"]


def _device(t: Optional[TimePlan]) -> str:
    """"CPU" for a time plan on CPU, else "GPU": the word its hours and devices are said in."""
    return "CPU" if t is not None and t.device.startswith("CPU") else "GPU"


def resources_json(p: Any, t: Optional[TimePlan] = None) -> dict[str, Any]:
    """The `resources` object of one run in `sweep --dry-run --json`: the memory plan, and the
    time plan (its headline numbers at the top level, the whole plan under "time")."""
    out = {"train_gib_per_gpu": p.train_gib_per_gpu,
           "generation_gib_per_gpu": p.generation_gib_per_gpu, "gpu_gib": p.gpu_gib,
           "fits": p.fits, "largest": p.largest, "train_budget_gib": p.train_budget_gib,
           "train_terms_gib": p.train, "generation_terms_gib": p.generation,
           "generation_where": p.generation_where, "kv_sequences": p.kv_sequences,
           "training_ranks": p.dp, "tokens_per_forward": p.tokens_per_forward,
           "params_b": p.params_b, "model": p.model, "note": p.note, "device": p.device}
    tj = t.to_json() if t is not None else {}
    out.update({"step_s": tj.get("step_s"), "eval_s": tj.get("eval_s"),
                "wall_h": tj.get("wall_h"), "gpu_hours": tj.get("gpu_hours"),
                "jobs": tj.get("jobs"), "requeues_needed": tj.get("requeues"),
                "max_requeues": tj.get("max_requeues"),
                "max_num_timeout": tj.get("max_num_timeout"), "reaches_budget": tj.get("reaches_budget"),
                "time": tj or None})
    return out


def launch_info(executor: str, why: str, prof: Profile, cap: Any) -> dict[str, Any]:
    """Where the jobs would go: the executor (and why that one), and its profile's settings
    as the executor describes them; `runs_at_once` is what it allows (`cap`)."""
    from ablate.studies import launch

    return {"executor": executor, "executor_from": why,
            **launch.EXECUTORS[executor].describe(prof, cap)}


def launch_text(info: dict[str, Any]) -> str:
    from ablate.studies import launch

    ex = info["executor"]
    return f"where: executor {ex} ({info['executor_from']})" + \
        launch.EXECUTORS[ex].sentence(info)


def command_of(v: Variant, run_dir: Path) -> Optional[str]:
    """The command a run executes (first attempt, written nothing), where its trainer runs as
    a program (the adapter's `command` capability); None for the built-in trainer, which
    trains in the job's process."""
    from ablate.adapters import adapter_of

    command = adapter_of(v.config).command
    return None if command is None else command(v.config, run_dir)


def warnings_of(shape: JobShape, plans: dict[str, Any], info: dict[str, Any]) -> list[str]:
    """What the plan could not check: GPU memory with no GPU size to check against."""
    out = []
    gpu_models = [p for p in plans.values() if p.train_gib_per_gpu is not None and
                  p.model != "proxy"]
    if shape.gpu_memory_gib is None and gpu_models:
        top = max(p.train_gib_per_gpu for p in gpu_models)
        no_gpus = shape.gpus_per_node == 0
        where = (f"the jobs would get no GPUs ({info['executor']}.gpus_per_node 0)" if no_gpus else
                 "GPUs not known here" if shape.gpus_per_node is None else
                 "gpu_memory_gib is not set")
        out.append(f"warning: the memory plan (up to {top:g} GiB per training GPU) is not "
                   f"checked against any GPU: {where}; use a profile that sets gpu_memory_gib "
                   "and the GPUs (e.g. --profile slurm_gpu)")
    return out


def print_dry_run(study: str, variants: list[Variant], shape: JobShape, as_json: bool,
                  prof: Optional[Profile] = None, executor: Optional[str] = None,
                  results: Path = Path("results"), study_name: str = "") -> None:
    from ablate.adapters import split_json, split_lines
    from ablate.studies.capacity import capacity
    from ablate.studies.sweep import executor_reason, resource_plans, time_plans
    from ablate.studydir import study_dir_for

    prof = prof or Profile()
    ex, why = executor_reason(executor, prof)
    if prof == Profile():
        why += "; no launch profile: default settings"
    cap = capacity(ex, prof)
    info = launch_info(ex, why, prof, cap)
    from ablate.studies.measured import comparison_lines, learn, ranges

    plans = resource_plans(variants, shape)
    times = time_plans(variants, shape, prof.limits(ex))
    root = study_dir_for(Path(results), study_name or Path(study).stem)
    # runs that have started: planned vs measured, and the rest re-planned from them;
    # before any has: each plan's range from the constants no one has measured
    learned = learn(variants, shape, prof.limits(ex), root)
    times = {**times, **learned.times}
    if not learned.docs:
        ranges(variants, shape, prof.limits(ex), times)
    commands = {v.run_id: command_of(v, root / v.run_id) for v in variants}
    if as_json:
        print(json.dumps([{**v.to_json(), "launch": info,
                           "resources": {**resources_json(plans[v.run_id], times[v.run_id]),
                                         "split": split_json(v.config, shape)},
                           "rates": learned.to_json(v.run_id),
                           **({"command": commands[v.run_id]} if commands[v.run_id] else {})}
                          for v in variants]))
        return
    width = _width()
    cpu = all(p.device == "CPU" for p in plans.values())
    rows = table(variants, plans, times, f"{study}: {count(len(variants), 'run')}", width)
    out = [launch_text(info), *warnings_of(shape, plans, info), "", *rows]
    per = "CPU process (RAM)" if cpu else "GPU"
    out += ["", f"Resource plan per {per} ({shape_text(shape, cpu)}; GiB) and time plan "
            "(docs/cluster.md):"]
    # Variants with the same plans (an axis that changes neither) are listed once.
    groups: dict[tuple[str, ...], list[str]] = {}
    for v in variants:
        key = tuple(plan_lines("", plans[v.run_id]) + split_lines(v.config, shape)
                    + time_lines(times[v.run_id]))
        names = groups.setdefault(key, [])
        if v.name not in names:
            names.append(v.name)
    for lines, names in groups.items():
        out += [" | ".join(names) + lines[0], *lines[1:]]
    if learned.docs:
        out += ["", *comparison_lines(learned.docs, len(variants), width)]
        out += [f"{name}: {line}" for name, line in learned.split.items()]
    cmds = [(v, c) for v in variants if (c := commands[v.run_id])]
    if cmds:
        out += ["", "Commands (first attempt; a retry adds the trainer's resume flag):"]
    commands_text = [x for v, c in cmds for x in command_lines(f"{v.run_id} {v.name} seed "
                                                               f"{v.seed}: ", c, width)]
    out += commands_text
    out += study_total(variants, times, cap)
    # the table (laid out for the width) and commands (folded as a shell reads them) stay
    print("\n".join(fold(out, width, keep={*rows, *commands_text})))


def _width() -> int:
    """The columns to fit (ablate/cli/width.py), at least 60: the plan's lines are not
    laid out for less."""
    return max(60, columns())


def command_lines(head: str, command: str, width: int) -> list[str]:
    """`head` and the command on one line where it fits, else folded between its arguments
    with ` \\` (a shell joins the lines back: the text still pastes as one command); an
    argument longer than the width stays whole."""
    import shlex

    one = head + command
    if len(one) <= width:
        return [one]
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: not split where the shell would not
        return [one]
    lines, cur = [], head.rstrip()
    for w in map(shlex.quote, words):
        if len(cur) + 1 + len(w) + 2 > width and cur.strip():
            lines.append(cur + " \\")
            cur = "    " + w
        else:
            cur = f"{cur} {w}" if cur.strip() else cur + w
    return [*lines, cur]


def table(variants: list[Variant], plans: dict[str, Any], times: dict[str, Any], title: str,
          width: int) -> list[str]:
    """The runs, one a line, laid out for `width` (ablate/cli/tables.py): no cell wraps (a
    column that does not fit is left out and named), the variant's name last and whole, the
    footnote under it."""
    import io

    from rich.console import Console

    from ablate.cli.tables import Col, table as layout

    cells: list[tuple[str, ...]] = []
    for v in variants:
        p, t = plans[v.run_id], times[v.run_id]
        fits = "" if p.fits is None else ("yes" if p.fits else "NO")
        tt = t if t is not None and t.step_s is not None else None
        req = reach = ""
        if tt is not None and tt.wall_h is not None:
            req = ("-" if tt.jobs is None else f"{tt.requeues}") + (
                "" if tt.max_num_timeout is None else f"/{tt.max_num_timeout}")
            reach = {True: "yes", False: "NO", None: ""}[tt.reaches_budget]
        cells.append((v.run_id, str(v.seed), _num(p.train_gib_per_gpu),
                      _num(p.generation_gib_per_gpu), fits,
                      dur(tt.step_s) if tt else "", dur(tt.eval_s) if tt else "",
                      _hours(tt.wall_h) if tt else "", _hours(tt.gpu_hours) if tt else "",
                      req, reach, v.name))
    dev = _device(next((t for t in times.values() if t is not None), None))
    # (header, drop: higher gives way first on a narrow terminal); the name is kept, whole
    heads = [("run_id", 1), ("seed", 4), ("train", 2), ("gen", 4), ("fits", 3), ("step", 6),
             ("eval", 7), ("wall h", 1), (f"{dev}-h", 2), ("requeues", 5), ("reach", 3)]
    cols = [Col(h, [c[i] for c in cells], justify="left", whole=h == "run_id", drop=d,
                unbroken=True)
            for i, (h, d) in enumerate(heads) if any(c[i] for c in cells)]
    cols.append(Col("name", [c[-1] for c in cells], justify="left", whole=True, keep=True))
    notes = [(("train",), "train: GiB of RAM per training process" if dev == "CPU"
              else "train: GiB per training GPU"), (("gen",), "gen: GiB per generation GPU"),
             (("wall h", f"{dev}-h"), f"wall h, {dev}-h: to the budget"),
             (("requeues",), "requeues: needed/allowed"),
             (("reach",), "reach: the budget under the profile")]
    con = Console(width=width, file=io.StringIO(), record=True, color_system=None)
    con.print(layout(con, title, cols, split_last=True, col_notes=notes))
    return [line.rstrip() for line in con.export_text().splitlines()]


def study_total(variants: list[Variant], times: dict[str, Any], cap: Any) -> list[str]:
    """The study's GPU-hours, and its wall time with the runs that can really run at once
    (ablate/studies/capacity.py: the study's nodes over a run's, not array_parallelism)."""
    from ablate.studies.capacity import study_wall_h, wall_text

    planned = [times[v.run_id] for v in variants
               if times[v.run_id] is not None and times[v.run_id].wall_h is not None]
    if not planned:
        return []
    gpu_h = sum(t.gpu_hours for t in planned)
    wall = study_wall_h([t.wall_h for t in planned], cap.runs_at_once)
    line = (f"study: {count(len(planned), 'planned run')}, {_hours(gpu_h)} {_device(planned[0])}-hours; "
            f"{cap.text()}"
            + (f": {wall_text(wall)}; queue waits not counted" if wall is not None else ""))
    refused = sum(1 for t in planned if t.reaches_budget is False)
    if refused:
        line += (f"; `ablate sweep` refuses it: {count(refused, 'run')} cannot reach the budget "
                 "(--force submits anyway)")
    return ["", line]


def _hours(h: Optional[float]) -> str:
    """Hours to read at a glance: 1,338 / 12.5 / 0.42."""
    if h is None:
        return ""
    return f"{h:,.0f}" if h >= 100 else f"{h:.3g}"


def _num(x: Any) -> str:
    return "" if x is None else f"{x:g}"


def dry_run(study: Path, *, executor: Optional[str], profile: Optional[str],
            overrides: list[str], as_json: bool, results: Path = Path("results"),
            force: bool = False) -> None:
    """`ablate sweep --dry-run`: check the study exactly as `sweep` does, print, write
    nothing. Exit 2 where `sweep` would refuse (`force` as there): on its inputs before
    printing, on a plan that does not fit or cannot reach its budget after printing the plans
    that say why (ablate/studies/sweep.py check_plans, the same rule)."""
    from ablate.studies.sweep import check_inputs, check_plans, intended_executor

    loaded, variants, prof = check_inputs(study, executor=executor, profile=profile,
                                          overrides=overrides, force=force)
    shape = prof.job_shape(intended_executor(executor, prof))  # the executor the times use
    print_dry_run(str(study), variants, shape, as_json, prof=prof,
                  executor=executor, results=results, study_name=loaded.study.name)
    if not force:
        sys.stdout.flush()  # the plans first, then the refusal's line on stderr
        check_plans(study, variants, prof, executor)
