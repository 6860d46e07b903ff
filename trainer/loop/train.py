"""The training loop, top to bottom: pool -> generate -> reward -> filter -> advantages ->
loss -> step -> weight push -> eval + metrics + checkpoint. `run(config, run_dir)` is the
entry; `train` is the loop, with the run's state (trainer/loop/state.py: step, counters, the
window of step statistics, the data position) in view: every stage takes what it reads and
writes as arguments. The stages with a job of their own are small objects built once at
start: the update math (trainer/loop/update.py), evaluation and the metrics row
(trainer/loop/eval_point.py), checkpoint / resume / preemption stops
(trainer/loop/checkpoint.py) and the budget (trainer/loop/accounting.py).

Multi-process jobs (Slurm srun / torchrun; trainer/dist/groups.py): data parallel on the
training side, replicated generation. Every rank runs the same prompt source with the same
seeds, and rank 0's batch is then broadcast so all ranks hold byte-identical rollouts (a GPU's
non-deterministic kernels could otherwise make them differ); rewards, pool statistics and the
zero-variance filter therefore agree everywhere. The kept prompt groups are dealt out to the
ranks by tokens and weighted so the rank-averaged gradient is the whole batch's
(trainer/loop/update.py). Why not shard generation: the hf generator on a ZeRO-3 model
all-gathers weights on every decode step, so ranks must decode in lockstep anyway; generation
throughput at scale comes from the vllm backend. Only rank 0 writes the run dir (status,
metrics, config); checkpoints are written by every rank (trainer/loop/checkpoint.py).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer import rundir, trackers
from trainer.dist import preempt
from trainer.algo.filters import zero_variance_keep
from trainer.algo.pool import DataPosition, PromptPool
from trainer.algo.rewards import score_and_reward
from trainer.config import TrainConfig
from trainer.dist.abort import FailFast, error_line, exit_soon
from trainer.dist.binding import bind_devices, job_shape, job_topology
from trainer.dist.groups import broadcast_object, read_env, world_size
from trainer.generation import node_host
from trainer.generation.feeders import step_batch
from trainer.generation.offpolicy import Context, concat
from trainer.torch_axes import MODES
from trainer.generation.vllm_args import check_vllm_version
from trainer.loop.accounting import Budget, count_generation
from trainer.loop.checkpoint import Checkpoints
from trainer.loop import final_eval
from trainer.loop.eval_point import EvalPoint, metrics_row, rollout_stats
from trainer.loop.rates import RateLog, planned
from trainer.loop.setup import Parts, build, setup_distributed
from trainer.loop.state import TrainState, StepMark
from trainer.loop.update import Diverged, PolicyUpdate


def run(config: TrainConfig, run_dir: Path) -> None:
    """Train (or resume) one run into `run_dir`. Returns when the budget is spent, or the run
    diverged (status.json says so with the step); raises after marking status `failed`.

    First of all this process is bound to its devices (trainer/dist/binding.py: before
    anything asks CUDA anything), and a vllm run refuses a vLLM other than the tested one. A
    rank that raises ends every rank of the job within seconds (trainer/dist/abort.py
    FailFast), and status.json's `error` is the failing rank's root cause in one line."""
    run_dir = Path(run_dir)
    entry_s = time.perf_counter()
    try:
        binding = bind_devices(config)
        if config.rollout.backend == "vllm":
            check_vllm_version()
    except (RuntimeError, ValueError) as e:  # one line each: no GPU of its own, another vLLM
        if read_env().rank == 0:
            run_dir.mkdir(parents=True, exist_ok=True)
            rundir.write_status(run_dir, "failed", 0, error=error_line(e))
        raise
    # node roles: generation nodes' hosts publish here, their feeders look here
    os.environ[node_host.HOSTS_DIR] = str(run_dir / ".engine-hosts")
    if not binding.trains:  # a generation node: its engines' host, in no training world
        node_host.serve_node(config, binding)
        return
    main = setup_distributed(config)
    step = [0]

    def record_abort(reason: str) -> None:  # rank 0's watchdog: a peer failed
        if main:
            rundir.write_status(run_dir, "failed", step[0], error=reason)

    env = read_env()
    guard = FailFast(env.rank, world_size(), env.master_addr, env.master_port, record_abort)
    try:
        if main:
            run_dir.mkdir(parents=True, exist_ok=True)
            rundir.write_config(run_dir, config)
        # A diverged run stays diverged (its last good checkpoint is kept for inspection). A
        # done run resumes like any other: with an unchanged budget it finishes at once, with a
        # larger one it continues from its checkpoint. Rank 0 decides for all.
        if broadcast_object(rundir.read_status(run_dir).get("state") == "diverged"
                            and rundir.checkpoint_dir(run_dir) is not None):
            return
        r = start(config, run_dir, entry_s)
        step[0] = r.state.step
        train(r)
    except Diverged as e:  # every rank sees the same verdict (it is all-reduced)
        if main:
            rundir.write_status(run_dir, "diverged", e.step,
                                reason="non-finite loss or grad")
    except BaseException as e:
        line = guard.fail(e) if world_size() > 1 else error_line(e)
        if main:
            rundir.write_status(run_dir, "failed", step[0], error=line,
                                traceback=traceback.format_exc()[-4000:])
        if world_size() > 1:
            exit_soon()  # even if this process's own exit waits on peers that are gone
        raise
    finally:
        guard.close()
        trackers.close()  # after the final status: trackers record done / failed / diverged


@dataclass
class Run:
    """One run: its fixed parts, its state, and the parts of a step, each built once."""

    config: TrainConfig
    dir: Path
    parts: Parts  # device, ranks, task, prompts, model, engine (setup.py)
    state: TrainState  # what the checkpoint saves (state.py)
    ctx: Context  # what the rollout source draws from (trainer/generation/offpolicy.py)
    budget: Budget  # accounting.py
    update: PolicyUpdate  # update.py
    evals: EvalPoint  # eval_point.py
    ckpt: Checkpoints  # checkpoint.py
    resumed: bool  # this attempt started from a checkpoint
    redo: list  # the checkpoint's evals not written yet (checkpoint.py unwritten_evals)
    rates: RateLog  # planned and measured rates (rates.py: rates.json)


def start(config: TrainConfig, run_dir: Path, entry_s: float = 0.0) -> Run:
    """The run's parts, and its state: fresh, or the latest checkpoint's."""
    p = build(config, run_dir)
    pool = PromptPool([x.difficulty for x in p.task.train], config.data, config.seed)
    state = TrainState(DataPosition(pool))
    ckpt = Checkpoints(config, run_dir, p)
    resumed, redo = ckpt.resume(state)
    ctx = Context(config, p.model, p.tok, state.data, p.train_prompts, restored=state.source)
    shape = job_shape(config, os.environ)[0]
    rates = RateLog(run_dir, p.main, planned(config, shape) if p.main else {}, entry_s,
                    dataclasses.asdict(shape))
    evals = EvalPoint(config, run_dir, p)
    evals.on_row = rates.eval_row
    return Run(config, run_dir, p, state, ctx,
               Budget(config, job_topology(config).devices), PolicyUpdate(config, p),
               evals, ckpt, resumed, redo, rates)


def train(r: Run) -> None:
    """The loop: first eval, then per step generate -> train -> push weights -> maybe eval
    and checkpoint, until the budget is spent or a stop signal asks for a requeue. Evals
    are launched, not waited for (trainer/loop/eval_point.py); the run is done when their
    lines are written. A stop signal inside generation or the update abandons the step in
    flight; inside the push it cuts the push (the step is finished: the boundary saves it)."""
    c, s, model = r.config, r.state, r.parts.model
    r.ckpt.start_attempt(s.step)
    write_status(r, "running")
    r.rates.started(s.step)
    source = MODES.get(c.off_policy.mode)(r.ctx)
    mark: StepMark | None = None
    closed: list[bool] = []

    def close() -> None:  # once: the eval worker, then the engine it may be using
        if not closed:
            closed.append(True)
            r.evals.close()
            source.close()

    try:
        if not r.resumed:
            evaluate(r, source)  # launched; decoded beside training (eval_service.py)
            r.ckpt.save(s, r.ctx.source_state, r.evals)
        source.after_step(model, s.step)  # resumed: stamp generator with this version
        r.evals.redo(r.redo, s.step, source, final=r.budget.spent(s))  # a stop or a kill ended
        while not r.budget.spent(s):
            t0 = time.perf_counter()
            preempt.at_step(s.step + 1)
            preempt.at_phase("generation")
            flops0 = s.counters.flops_gen + s.counters.flops_train
            mark = s.mark(r.ctx.source_state)
            batch = next_batch(source, s.step)  # rank 0's data everywhere, or its stop
            train_step(r, batch)
            s.step += 1
            mark = None  # (it may hold weight snapshots the push below lets go)
            preempt.at_phase("push")
            source.after_step(model, s.step)  # the weight push
            dt = time.perf_counter() - t0
            s.counters.wall += dt
            r.rates.step(dt, s.counters.flops_gen + s.counters.flops_train - flops0)
            preempt.at_phase("boundary")
            write_status(r, "running", phase="generation")
            last = r.budget.spent(s)
            if last:  # the last batch is trained: no rollout can be trained on any more
                source.stop_generating()
            stop, timely = r.ckpt.boundary_flags(r.evals)
            if c.eval.due(s.step) or last:
                r.rates.write()
                evaluate(r, source, final=last)
                r.ckpt.save(s, r.ctx.source_state, r.evals)
            elif s.step % c.checkpoint.every_steps == 0 or timely or stop:
                r.ckpt.save(s, r.ctx.source_state, r.evals)
            if stop and not last:  # saved at this boundary; the launcher requeues
                stop_for_preemption(r)
                return
        source.stop_generating()  # (a run resumed with its budget spent: never started)
        # The last eval on every node's engines (every rank), else rank 0 waits for its lines.
        if not final_eval.finish(r.evals, source) and r.parts.main:
            r.evals.finish()
    except preempt.Stopped:  # inside generation or the update, an eval at the end: every rank
        close()  # the generator thread stops drawing from the pool before it is restored
        abandon_step(r, mark)
        return
    finally:
        close()
        r.rates.write()  # (the last evals' seconds too: close() waited for them)
    write_status(r, "done")


def train_step(r: Run, batch) -> None:
    """One optimizer step on one batch of rollouts: reward -> filter -> counters -> update;
    its statistics join the window that the next metrics line averages."""
    c, s, p = r.config, r.state, r.parts
    G = c.rollout.generations_per_prompt
    correct, rewards = score_and_reward(p.task, [p.task.train[i] for i in batch.prompt_ids],
                                        p.tok, batch.rollout, G, c.reward)
    for j, pid in enumerate(batch.prompt_ids):  # each prompt's pass count: curriculum, NPR
        s.data.pool.record(pid, sum(correct[j * G:(j + 1) * G]), G)
    keep = zero_variance_keep(rewards, G, c.data.zero_variance_filter)  # groups with a gradient
    dropped = len(batch.prompt_ids) - len(keep)
    s.counters.zero_variance_dropped += dropped
    rows = [j * G + i for j in keep for i in range(G)]
    count_generation(s.counters, batch, p.n_params)
    stats = rollout_stats(s, batch, correct, rewards, rows, dropped)
    r.rates.batch(batch, len(batch.prompt_ids), len(keep))
    if rows:
        preempt.at_phase("update")
        write_status(r, "running", phase="update")  # (`ablate status`; the rehearsal aims here)
        t_update = time.perf_counter()
        trained = r.update(batch.rollout, rows, rewards, s.step)
        r.rates.update(time.perf_counter() - t_update, trained.tokens, trained.flops)
        s.counters.tokens += trained.tokens
        s.counters.flops_train += trained.flops
        stats.update(trained.stats)
    s.window.add(stats)


def next_batch(source, step: int):
    """The step's batch: rank 0's, broadcast, or each node's share joined (pipeline mode
    with vLLM on several nodes: trainer/generation/feeders.py). A stop signal inside a
    feeder's generation (trainer/dist/preempt.py Stopped; from the pipeline's generator thread
    it arrives as the cause of its failure) is sent instead, and every rank raises Stopped."""
    try:
        mine = source.next(step)
    except preempt.Stopped:
        mine = preempt.STOP
    except RuntimeError as e:
        if not isinstance(e.__cause__, preempt.Stopped):
            raise
        mine = preempt.STOP
    feeders = getattr(source, "feeders", None)  # the sources that can have several
    ranks = getattr(source, "step_ranks", feeders.ranks if feeders else (0,))  # ppo: (0,)
    got = step_batch(mine, ranks, preempt.STOP, concat)
    if isinstance(got, str) and got == preempt.STOP:
        raise preempt.Stopped("stop signal inside generation")
    return got


@torch.no_grad()
def evaluate(r: Run, source, final: bool = False) -> None:
    """The eval point of this step: its metrics row (the counters now, the window's means)
    handed with this step's weights to the eval, which writes the row when it is done
    (`final`: the run's last, trainer/loop/final_eval.py)."""
    s = r.state
    row = metrics_row(s, r.budget.gpu_hours(s.counters), source)
    r.evals.launch(s.step, row, source, r.evals.step_weights(source, s.step), final=final)


def abandon_step(r: Run, mark: StepMark | None) -> None:
    """A stop signal inside a step (every rank): put back what the step drew and counted
    (`mark`: the step's start; None outside a step), checkpoint the last finished step, with
    the source's state as that step left it, unless that is saved already; record the stop."""
    source_state = r.ctx.source_state
    if mark is not None:
        r.state.rewind(mark)
        source_state = lambda: mark.source  # noqa: E731
    if r.ckpt.saved[0] != r.state.step:
        r.ckpt.save(r.state, source_state, r.evals)
    stop_for_preemption(r)


def stop_for_preemption(r: Run) -> None:
    """Record the stop (status.json, stderr, trainer.dist.preempt) after the boundary's save,
    with the eval progress made since it (checkpoint.py save_eval_progress)."""
    r.ckpt.save_eval_progress(r.evals)
    r.ckpt.record_stop(r.state.step)
    write_status(r, "running")  # still running as far as the study goes: the job requeues
    if r.parts.main:
        print(f"[trainer] stop signal: checkpointed at step {r.state.step}, stopping for the "
              "requeue", file=sys.stderr, flush=True)


def write_status(r: Run, state: str, phase: str | None = None) -> None:
    """status.json (rank 0): state, step, progress, and the run's preemption record
    (`preemptions`: over all attempts, per stop signal the step and phase rank 0 was working
    on when it arrived and the step checkpointed at; `resumed_from`: the checkpoint step this
    attempt started from). `phase` while running: "update" from the step's update on,
    "generation" from the step boundary on (its eval launch and checkpoint, then the next
    batch)."""
    if r.parts.main:
        rundir.write_status(r.dir, state, r.state.step, total_steps=r.config.budget.steps,
                            progress=round(r.budget.fraction(r.state), 4), **r.ckpt.notes,
                            **({"phase": phase} if phase else {}))
