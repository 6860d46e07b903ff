"""How long a run will take, beside how much memory it needs (trainer/plan/memory.py): per step
(generation and training), per evaluation, to the budget (wall hours, GPU-hours), and how many
Slurm jobs (requeues) that takes under a profile's time limit.

Why: a plan that covers memory only lets a study be launched that cannot finish. A step-0 eval
that takes hours behind a 2-hour barrier inside a 4-hour job fails as surely as an OOM, and a
run that needs 650 hours of wall time under `max_num_timeout: 50` x 4 h jobs stops at 200.
`ablate sweep --dry-run` shows this plan; `ablate sweep` refuses a study whose plan cannot
reach its budget under the profile (ablate/studies/sweep.py, `--force` overrides).

Pure Python (no torch): ablate plans thousands of variants with it. Every number below is an
estimate from named constants; each constant says where it comes from, and the ones that are
assumptions say so. What is not modelled: network weight pushes (~1 s a step at 8B), the
reward scorer, data loading, the hf sampler's Python overhead on GPUs.

The plan in three modules: the device constants and rates, each formula with its source
(time_model.py: decode rooflines, training FLOPs, the CPU proxy's measured constants); a step,
an eval and the run to its budget from those, on the engines and ranks of the job's topology
(here: with vLLM every node's engines decode their node's share of a step, or in
ppo_off_policy of a big generation, and with several nodes every eval, rollouts paused; on one node eval goes to rank 0's pinned
engines; pipeline mode overlaps generation and training, a step
is the slower of them, while ppo_off_policy and the hf backend take turns); the jobs and
requeues under the profile's limits and whether an eval fits (time_jobs.py).
"""

from __future__ import annotations

import math
from typing import Optional

from trainer.config import TrainConfig
from trainer.counted import count
from trainer.plan.memory import on_cpu
from trainer.plan.model_shape import ModelShape, model_shape, proxy_shape
from trainer.plan.placement import (dealt_groups, eval_engines, eval_rows, fleet_eval,
                                    largest_share, rollout_rows)
from trainer.plan.time_jobs import Limits, TimePlan, dur, eval_checks, jobs  # noqa: F401 (dur)
from trainer.plan.time_model import (  # noqa: F401 (lengths: ablate reads the plan's here)
    ASSUMED, CHECKPOINT_BYTES_PER_S, COMPLETION_SHARE, CPU_DECODE_FLOPS, CPU_DECODE_ITER_S,
    CPU_STEP_OVERHEAD_S, CPU_TRAIN_FLOPS, DECODE_BW_EFFICIENCY, DECODE_BW_RANGE, DEFAULT_GPU,
    GPUS, TRAIN_MFU_RANGE, configured_completion,
    HF_GPU_DECODE_ITER_S, JOB_START_S_CPU, JOB_START_S_GPU, PREFILL_MFU, TRAIN_MFU, Assume,
    budget_steps, completion_cap, count_evals, decode_rate, engine_concurrency,
    eval_overlaps_training, hf_rate, lengths, sample_counts, train_flops, trained_tokens)
from trainer.plan.topology import JobShape, Topology, TopologyError, topology


def plan_time(c: TrainConfig, shape: JobShape, limits: Limits = Limits(),
              a: Assume = ASSUMED) -> TimePlan:
    """The time plan of one run on `shape` under `limits` (see the module doc), on the rates
    `a` takes (time_model.Assume: the constants, a range's end, or measured rates)."""
    name = c.model.name_or_path
    m, why = (proxy_shape(c), "") if name is None else model_shape(name)
    tp = TimePlan()
    if m is None:
        tp.note = f"model shape unknown: {why}; no time estimate"
        return tp
    try:
        topo = topology(c, shape)
    except TopologyError as e:  # what the validation refuses: the plan says why, no numbers
        tp.note = f"no time estimate: {e}"
        return tp
    gpus = shape.gpus_per_node
    if gpus:
        _gpu_step(c, m, topo, limits, tp, a)
    elif on_cpu(c, shape):
        _cpu_step(c, m, topo, tp, a)
    else:
        tp.note = ("no time estimate: the profile names no GPUs for a "
                   f"{m.params / 1e9:.1f}B model (set slurm.gpus_per_node)"
                   if gpus == 0 else "no time estimate: GPUs not known here (use a profile "
                   "with slurm.gpus_per_node, e.g. --profile slurm_gpu)")
        return tp
    _measured(c, m, topo, tp, a)
    _to_budget(c, m, shape, limits, tp, a)
    return tp


def _measured(c: TrainConfig, m: ModelShape, topo: Topology, tp: TimePlan, a: Assume) -> None:
    """Where `a` holds what runs measured (trainer/plan/rates.py calibration), a step's
    generation, its training and an eval take the model's time over the measured speed-up,
    and the step is combined as before, times what the runs' steps measured over their parts
    so combined (the push, the reward, Python; on CPU the generator thread's wall counts its
    waits for the GIL)."""
    tp.engines = generating_engines(c, topo)
    if (a.gen_speed, a.train_speed, a.eval_speed, a.step_factor) == (1.0, 1.0, 1.0, 1.0):
        return
    tp.generation_s = (tp.generation_s or 0.0) / a.gen_speed
    tp.generation_tokens_per_s = round((tp.generation_tokens_per_s or 0.0) * a.gen_speed, 1)
    tp.train_s = (tp.train_s or 0.0) / a.train_speed
    if tp.eval_s is not None:
        tp.eval_s /= a.eval_speed
    if tp.eval_cost_s is not None:
        tp.eval_cost_s /= a.eval_speed
    blocks = tp.eval_blocks_training
    _combine(c, tp)
    tp.eval_blocks_training = blocks
    tp.step_s *= a.step_factor


def generating_engines(c: TrainConfig, topo: Topology) -> int:
    """What generates a step, counted as a rate per engine is measured (trainer/loop/
    rates.py): every node's vLLM engines, else each training rank's hf sampler (one CPU
    process: one)."""
    if c.rollout.backend == "vllm":
        return max(1, topo.engine_nodes * len(topo.engines))
    return max(1, topo.training_ranks)


def refill_s(c: TrainConfig, tp: TimePlan) -> float:
    """What a job's first step costs beyond a steady one: where generation and training
    overlap (pipeline mode with vLLM), a job starts with no rollouts queued, so its first step
    waits for a whole generation before training: min(generation, training) more. Where they
    take turns, nothing (a ppo_off_policy big generation cut by a stop is the job's tail,
    "job ends")."""
    if tp.overlap.startswith("pipeline: generation and training overlap"):
        return min(tp.generation_s or 0.0, tp.train_s or 0.0)
    return 0.0


def _gpu_step(c: TrainConfig, m: ModelShape, topo: Topology, limits: Limits,
              tp: TimePlan, a: Assume = ASSUMED) -> None:
    """A step and an eval on GPUs: the engines' (or the hf sampler's) decode rate, training at
    TRAIN_MFU over the training ranks (time_model.py)."""
    key = (limits.gpu_model or DEFAULT_GPU).lower()
    gpu = GPUS.get(key, GPUS[DEFAULT_GPU])
    why = "datasheet" if limits.gpu_model else "assumed: no gpu_model in the profile"
    tp.device = f"{gpu.name} ({why})"
    tp.assumptions += [f"GPU: {gpu.source}", f"training MFU {a.train_mfu:g} (Llama 3 Table 4: "
                       "38-43% on H100; less under ZeRO-3)",
                       f"decode at {a.decode_bw:g} of HBM bandwidth (assumption)"]
    samples, prompt, completion = sample_counts(c, a)
    share = completion / max(completion_cap(c), 1.0)
    tp.assumptions.append(f"{prompt:,.0f} prompt + {completion:,.0f} completion tokens a sample "
                          f"({share:.0%} of the cap" + (": an upper bound)" if share >= 1 else ")"))
    ctx = prompt + completion / 2  # mean context of a decoding sequence
    gen_tokens = samples * completion
    prefill = c.rollout.prompts_per_step * prompt
    if c.rollout.backend == "vllm":
        # Rollouts: every node's engines, each its node's call over its replicas (every node
        # generates its dealt share of a step's groups, ppo_off_policy of a big generation's);
        # eval: every node's engines, or on one node rank 0's pinned ones (placement.py).
        # A step's prompts are dealt over the nodes (placement.py shares): the step waits for
        # the node with the largest share, so the job's rate is the node rate times the step's
        # prompts over that share (nodes, where they divide; 48 / 5 = 9.6 on 10 nodes).
        nodes, replicas, size = topo.engine_nodes, len(topo.engines), topo.tp
        dealt = dealt_groups(c) / largest_share(c, nodes)  # ppo_off_policy: a big generation's
        # the stream reserves each sample's whole footprint (dealing.py): the same rule here
        foot = prompt + completion
        b = engine_concurrency(c, m, topo, math.ceil(rollout_rows(c, nodes) / replicas), foot)
        rate = dealt * replicas * decode_rate(m, c, gpu, tp=size, concurrent=b, ctx=ctx,
                                              bw_eff=a.decode_bw)
        gen_gpus, eval_gpus = dealt * replicas * size, replicas * size
        on = f" on each of {nodes} nodes" if nodes > 1 else ""
        tp.assumptions.append(f"{count(replicas, 'engine')} of {count(size, 'GPU')}{on}, "
                              f"{b:.0f} sequences decoding at once each")
        # eval: every node's engines (fleet_eval), else rank 0's node's
        eval_engines_n = replicas * (nodes if fleet_eval(c, topo) else 1)
        eval_b = engine_concurrency(c, m, topo, math.ceil(eval_rows(c) / eval_engines_n), foot)
        eval_rate = eval_engines_n * decode_rate(m, c, gpu, tp=size, concurrent=eval_b,
                                                 ctx=ctx, bw_eff=a.decode_bw)
        eval_gpus = eval_engines_n * size
    else:  # the hf sampler on the training GPUs, each rank its rows
        dp = topo.training_ranks
        rows = math.ceil(samples / dp)
        rate = dp * hf_rate(m, c, gpu, rows, ctx)
        gen_gpus = eval_gpus = dp
        eval_k = c.eval.samples_per_prompt
        eval_batch = max(eval_k, (c.eval.batch_size or 64 * eval_k) // eval_k * eval_k)
        eval_rate = hf_rate(m, c, gpu, eval_batch, ctx)  # rank 0 alone (or ranks in lockstep)
        tp.assumptions.append(f"hf sampler: {HF_GPU_DECODE_ITER_S * 1e3:g} ms a decode "
                              "iteration besides its memory reads (measured on an H100, before "
                              "the captured decode step)")
    prefill_s = prefill * 2.0 * m.params / (gpu.peak_flops * PREFILL_MFU * gen_gpus)
    tp.generation_tokens_per_s = round(rate, 1)
    tp.generation_s = gen_tokens / rate + prefill_s
    dp = topo.training_ranks
    flops = train_flops(c, m, a.kept_share * samples * (prompt + completion),
                        (prompt + completion) / 2)
    tp.train_s = flops / (dp * gpu.peak_flops * a.train_mfu)
    tp.peak_flops = gpu.peak_flops
    n_eval = (c.eval.num_prompts or c.task.num_eval_prompts)
    tp.eval_s = (n_eval * c.eval.samples_per_prompt * completion / eval_rate
                 + n_eval * prompt * 2.0 * m.params / (gpu.peak_flops * PREFILL_MFU * eval_gpus))
    _combine(c, tp)
    if c.rollout.backend == "vllm" and fleet_eval(c, topo):
        tp.assumptions.append(f"eval on all {topo.engine_nodes * len(topo.engines)} engines of "
                              f"the {topo.engine_nodes} nodes at its step's weights, rollouts "
                              "paused and training waiting (trainer/loop/final_eval.py)")
        tp.eval_cost_s = tp.eval_s
        tp.eval_blocks_training = tp.eval_resumable = True
    elif c.rollout.backend == "vllm":
        eval_cost_s(c, tp, len(topo.engines))
    mixed = c.engine.type == "deepspeed" and c.precision.dtype == "bf16"
    tp.checkpoint_s = m.params * (14 if mixed else 16) / CHECKPOINT_BYTES_PER_S
    tp.devices = topo.devices


def eval_cost_s(c: TrainConfig, tp: TimePlan, replicas: int) -> None:
    """The eval on engines pinned at its step's weights (trainer/generation/pins.py: why): E =
    eval_engines(R) of rank 0's node's R engines decode it alone, so it takes R/E of the
    time the node's R engines would (tp.eval_s, set before as that), while that node's share
    of every step is decoded by R - E engines: its generation takes R/(R-E) as long and the
    step is combined from that (pipeline: the slower of generation and training). The wall
    an eval costs is what the steps meanwhile lose, D x (1 - step / slowed step): in the
    generation-bound case exactly the eval's tokens on the node's R engines, whatever E; with
    training the slower side, less. One engine (R = 1) is shared and a push waits for the
    eval: it blocks training for its whole duration. Sets eval_s (the eval's own duration),
    eval_cost_s (wall per eval, read by _to_budget) and, for R = 1, eval_blocks_training."""
    e = eval_engines(replicas)
    tp.assumptions.append(f"eval on {e} of rank 0's node's {count(replicas, 'engine')}, pinned "
                          "at its step's weights (no pushes there while it decodes)")
    if replicas == 1 or not tp.eval_s:
        tp.eval_cost_s = tp.eval_s
        tp.eval_blocks_training = True
        return
    tp.eval_s = tp.eval_s * replicas / e
    gen, train = (tp.generation_s or 0.0) * replicas / (replicas - e), tp.train_s or 0.0
    slowed = max(gen, train) if c.off_policy.mode == "pipeline" else gen + train
    tp.eval_cost_s = tp.eval_s * (1.0 - tp.step_s / slowed) if slowed > 0 else 0.0


def _cpu_step(c: TrainConfig, m: ModelShape, topo: Topology, tp: TimePlan,
              a: Assume = ASSUMED) -> None:
    """The CPU proxy: per-iteration decode overhead plus FLOPs, training FLOPs plus a per-step
    overhead (constants measured on this project's machine)."""
    tp.device = "CPU (constants measured on the project's 2-core machine, one thread)"
    samples, prompt, completion = sample_counts(c, a)
    calls = 1
    if c.off_policy.mode == "pipeline" and c.off_policy.groups_per_call:
        calls = math.ceil(c.rollout.prompts_per_step / c.off_policy.groups_per_call)
    ctx = prompt + completion / 2
    iters = calls * (completion + 1)
    gen_flops = samples * (completion * 2.0 * m.params + prompt * 2.0 * m.params)
    tp.generation_s = iters * CPU_DECODE_ITER_S + gen_flops / CPU_DECODE_FLOPS
    tp.generation_tokens_per_s = round(samples * completion / tp.generation_s, 1)
    tp.train_s = (train_flops(c, m, a.kept_share * samples * (prompt + completion), ctx)
                  / CPU_TRAIN_FLOPS + CPU_STEP_OVERHEAD_S)
    n_eval = c.eval.num_prompts or c.task.num_eval_prompts
    rows = n_eval * c.eval.samples_per_prompt
    per_call = c.eval.batch_size or 64 * c.eval.samples_per_prompt
    tp.eval_s = (math.ceil(rows / per_call) * (completion + 1) * CPU_DECODE_ITER_S
                 + rows * (completion + prompt) * 2.0 * m.params / CPU_DECODE_FLOPS)
    tp.assumptions.append(f"{prompt:,.0f} prompt + {_tok(completion)} completion tokens a sample")
    _combine(c, tp)
    tp.checkpoint_s = m.params * 16 / 200e6  # local disk, measured order: ~200 MB/s
    tp.devices = topo.devices


def _combine(c: TrainConfig, tp: TimePlan) -> None:
    """A step's wall from its parts: pipeline overlaps generation and training when the
    generator has a device of its own (vLLM on its own GPUs; a thread on CPU); otherwise
    they take turns."""
    gen, train = tp.generation_s or 0.0, tp.train_s or 0.0
    if c.off_policy.mode == "pipeline" and tp.device.startswith("CPU"):
        # The generator is a thread of the trainer's process: at the proxy's size both sides
        # are mostly Python overhead under one GIL, so they take turns (measured: the sum is
        # 5-27% over the proxy's pipeline steps, the max 23-37% under; loaded).
        tp.step_s = gen + train
        tp.overlap = "pipeline on CPU: generator thread and trainer share the GIL (taking turns)"
    elif c.off_policy.mode == "pipeline" and c.rollout.backend != "vllm":
        tp.step_s = gen + train
        tp.overlap = "pipeline with the hf generator: it shares the training GPUs (taking turns)"
    elif c.off_policy.mode == "pipeline":
        tp.step_s = max(gen, train)
        tp.overlap = "pipeline: generation and training overlap (the slower sets the pace)"
    else:
        tp.step_s = gen + train
        tp.overlap = f"{c.off_policy.mode}: generation, then training"
    tp.eval_blocks_training = not eval_overlaps_training(c)


def _to_budget(c: TrainConfig, m: ModelShape, shape: JobShape, limits: Limits,
               tp: TimePlan, a: Assume = ASSUMED) -> None:
    """Steps, evals, checkpoints, wall and GPU-hours to the budget; jobs and requeues under
    the profile's limits; what stops the run from reaching its budget."""
    samples, prompt, completion = sample_counts(c, a)
    tp.completion_tokens, tp.kept_share = completion, a.kept_share
    # FLOPs as the trainer counts them (trainer/loop/accounting.py): 2N per token a sample's
    # generation ran, its prompt included (trainer/generation/stream.py gen_tokens), and 6N
    # per token the update processed
    per_step_flops = (2.0 * m.params * samples * (prompt + completion)
                      + 6.0 * m.params * trained_tokens(c, a))
    tp.flops_per_step = per_step_flops
    tp.train_flops_per_step = 6.0 * m.params * trained_tokens(c, a)
    steps = budget_steps(c, tp.step_s, per_step_flops, tp.devices or 1)
    if steps is None:
        tp.note = "no budget limit to plan against"
        return
    tp.steps = steps
    tp.evals = count_evals(c, steps)
    every = c.eval.every_steps
    tp.eval_interval_s = every * tp.step_s
    if tp.eval_blocks_training or tp.device.startswith("CPU"):  # CPU: one GIL, taking turns
        eval_cost = tp.eval_s
    elif tp.eval_cost_s is not None:  # on pinned engines (eval_cost_s)
        eval_cost = tp.eval_cost_s
    else:  # beside training on the engines: only what the window's slack does not absorb
        eval_cost = max(0.0, every * (tp.generation_s or 0.0) + tp.eval_s - every * tp.step_s)
    tp.checkpoints = steps // c.checkpoint.every_steps + tp.evals
    run_s = steps * tp.step_s + tp.evals * eval_cost + tp.checkpoints * tp.checkpoint_s
    start = a.job_start_s if a.job_start_s is not None else (
        JOB_START_S_GPU if shape.gpus_per_node else JOB_START_S_CPU)
    refill = a.refill_s if a.refill_s is not None else refill_s(c, tp)
    tp.job_start_s, tp.refill_s = start, refill
    jobs(c, tp, limits, run_s, start + refill)
    if tp.jobs and tp.jobs > 1 and tp.steps_per_job and limits.time_min:
        # Every job but the last runs to its time limit; the last runs what is left.
        left = steps - (tp.jobs - 1) * tp.steps_per_job
        tp.wall_h = ((tp.jobs - 1) * limits.time_min * 60 + start + refill
                     + left * run_s / steps) / 3600
    else:
        tp.wall_h = (run_s + start + refill) / 3600
    n_jobs = tp.jobs or 1
    tp.wall_parts_h = {"steps": steps * tp.step_s / 3600,
                       "evals": tp.evals * eval_cost / 3600,
                       "checkpoints": tp.checkpoints * tp.checkpoint_s / 3600,
                       "job starts": n_jobs * start / 3600,
                       "refills": n_jobs * refill / 3600}
    # What is left is each requeued job's tail (wall_h's own formula above, less the rest)
    tp.wall_parts_h["job ends"] = max(0.0, tp.wall_h - sum(tp.wall_parts_h.values()))
    tp.gpu_hours = tp.wall_h * (tp.devices or 1)
    eval_checks(c, tp, limits)
    big_generation_check(c, tp, limits, start)


def big_generation_check(c: TrainConfig, tp: TimePlan, limits: Limits, start: float) -> None:
    """ppo_off_policy generates k steps' prompts in one go, and a stop inside it abandons it
    (trainer/generation/offpolicy.py PPOOffPolicy: its minibatches are kept only once it has
    ended), so a job must hold a whole one after its start: else no job ever finishes one."""
    if c.off_policy.mode != "ppo_off_policy" or not limits.time_min or not tp.generation_s:
        return
    big = c.off_policy.k * tp.generation_s
    usable = limits.time_min * 60 - start - (limits.signal_delay_s or 0)
    if big > usable and not tp.problem:
        tp.reaches_budget = False
        tp.problem = (f"one big generation (off_policy.k={c.off_policy.k} steps' prompts) takes "
                      f"{dur(big)}, longer than a {dur(limits.time_min * 60)} job after its "
                      f"start: a stop inside it abandons it, so no job finishes one; lower "
                      f"off_policy.k or raise {limits.time_key}")


def plan_range(c: TrainConfig, shape: JobShape, limits: Limits = Limits()) -> Optional[dict]:
    """The plan before any run has measured, as a range (issue 47 point 6): at the uncertain
    constants' fast ends (training MFU 0.35, decode at 0.8 of HBM bandwidth, completions at
    their configured mean: time_model.configured_completion) and slow ends (0.25, 0.5, at the
    cap); and which one constant moves the step most from the fast end to its slow end (the
    one that sets it). On CPU only the completions are uncertain (the rest was measured).
    None where the plan has no step."""
    fast = ASSUMED.with_(train_mfu=TRAIN_MFU_RANGE[1], decode_bw=DECODE_BW_RANGE[1],
                         completion=configured_completion(c), source="fast")
    cap = completion_cap(c)
    slow = fast.with_(train_mfu=TRAIN_MFU_RANGE[0], decode_bw=DECODE_BW_RANGE[0],
                      completion=cap, source="slow")
    pf, ps = plan_time(c, shape, limits, fast), plan_time(c, shape, limits, slow)
    if pf.step_s is None or ps.step_s is None:
        return None
    gpu = bool(shape.gpus_per_node)
    # name -> (its range in words, the slow end)
    knobs = {"the completions' length": (f"completions {_tok(fast.completion)}-{_tok(cap)} "
                                         "tokens", {"completion": cap})}
    if gpu:
        knobs["the training MFU"] = (f"training MFU {TRAIN_MFU_RANGE[1]:g}-"
                                     f"{TRAIN_MFU_RANGE[0]:g}", {"train_mfu": TRAIN_MFU_RANGE[0]})
        if c.rollout.backend == "vllm":
            knobs["the decode bandwidth"] = (f"decode {DECODE_BW_RANGE[1]:g}-"
                                             f"{DECODE_BW_RANGE[0]:g} of HBM bandwidth",
                                             {"decode_bw": DECODE_BW_RANGE[0]})
    swing = {k: (plan_time(c, shape, limits, fast.with_(**kw)).step_s or 0.0) - pf.step_s
             for k, (_, kw) in knobs.items()}

    def ends(key: str) -> Optional[list]:
        a, b = getattr(pf, key), getattr(ps, key)
        return None if a is None or b is None else sorted([a, b])
    return {"step_s": ends("step_s"), "steps": ends("steps"), "wall_h": ends("wall_h"),
            "gpu_hours": ends("gpu_hours"), "constants": [w for w, _ in knobs.values()],
            "sets_step": max(swing, key=lambda k: swing[k])}


def _tok(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"
