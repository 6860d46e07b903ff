"""The training loop, top to bottom: pool -> generate -> reward -> filter -> advantages ->
loss -> step -> weight push -> eval + metrics + checkpoint. One function, `run`; the loop itself
is `_Run.train`, and the stages it calls live here or, by job, in the classes `_Run` mixes in:
the update math (trainer/loop/update.py), evaluation and the metrics row (trainer/loop/eval_point.py),
checkpoint / resume / preemption stops (trainer/loop/checkpoint.py) and compute accounting
(trainer/loop/accounting.py).

Multi-process jobs (Slurm srun / torchrun; trainer/dist/groups.py): data parallel on the
training side, replicated generation. Every rank runs the same prompt source with the same
seeds, and rank 0's batch is then broadcast so all ranks hold byte-identical rollouts (a GPU's
non-deterministic kernels could otherwise make them differ); rewards, pool statistics and the
zero-variance filter therefore agree everywhere. The kept prompt groups are dealt out to the
ranks by tokens and weighted so the rank-averaged gradient is the whole batch's
(trainer/loop/update.py). Why not shard generation: the hf generator on a ZeRO-3 model all-gathers
weights on every decode step, so ranks must decode in lockstep anyway; generation throughput at
scale comes from the vllm backend. Only rank 0 writes the run dir (status, metrics, config);
checkpoints are written by every rank (trainer/loop/checkpoint.py).
"""

from __future__ import annotations

import random
import time
import traceback
from pathlib import Path

import torch

from trainer import preempt, rundir, trackers
from trainer.loop.accounting import Accounting, new_counters
from trainer.models.chat import prompt_encoder
from trainer.loop.checkpoint import Checkpointing
from trainer.config import TrainConfig
from trainer.dist.abort import FailFast, error_line, exit_soon
from trainer.dist.binding import bind_devices
from trainer.dist.groups import (
    broadcast_object,
    group_timeout_s,
    join_process_group,
    rank,
    read_env,
    world_size,
)
from trainer.engine import make_engine
from trainer.generation.feeders import step_batch
from trainer.generation.vllm_args import check_vllm_version
from trainer.loop.eval_point import EvalPoint
from trainer.evaluate import score
from trainer.algo.filters import zero_variance_keep
from trainer.models.load import load_model, pick_device
from trainer.generation.offpolicy import MODES, Context, concat
from trainer.algo.pool import PromptPool
from trainer.models.precision import LMHead
from trainer.tasks import build_task
from trainer.loop.update import Diverged, PolicyUpdate


def run(config: TrainConfig, run_dir: Path) -> None:
    """Train (or resume) one run into `run_dir`. Returns when the budget is spent, or the run
    diverged (status.json says so with the step); raises after marking status `failed`.

    First of all this process is bound to its devices (trainer/dist/binding.py: before anything
    asks CUDA anything), and a vllm run refuses a vLLM other than the tested one. A rank that
    raises ends every rank of the job within seconds (trainer/dist/abort.py FailFast), and
    status.json's `error` is the failing rank's root cause in one line."""
    run_dir = Path(run_dir)
    try:
        bind_devices(config)
        if config.rollout.backend == "vllm":
            check_vllm_version()
    except (RuntimeError, ValueError) as e:  # one line each: no GPU of its own, another vLLM
        if read_env().rank == 0:
            run_dir.mkdir(parents=True, exist_ok=True)
            rundir.write_status(run_dir, "failed", 0, error=error_line(e))
        raise
    main = _setup_distributed(config)
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
        state = _Run(config, run_dir)
        step[0] = state.step
        state.train()
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


def _setup_distributed(config: TrainConfig) -> bool:
    """Join the launcher's process group (multi-process jobs only); True on rank 0. The torch
    engine is data parallel through its gradient all-reduce, the deepspeed engine through
    DeepSpeed; both need the group before the engine is built. Its collectives wait up to
    engine.collective_timeout_minutes (rank 0's lone vllm eval keeps the others at a barrier).
    The process's device was bound before (trainer/dist/binding.py bind_devices)."""
    return join_process_group(config.engine.device, timeout_s=group_timeout_s(config))


class _Run(Checkpointing, Accounting, EvalPoint, PolicyUpdate):
    """State of one run; `train` is the loop, and the methods here are its stages in the order
    they happen. Stages with a job of their own come from the classes mixed in: checkpoint,
    resume and preemption stops (Checkpointing), counters and budget (Accounting), evaluation
    and the metrics row (EvalPoint), the update math (PolicyUpdate)."""

    def __init__(self, config: TrainConfig, run_dir: Path) -> None:
        self.c, self.dir = config, run_dir
        torch.set_flush_denormal(True)  # tiny models hit denormals: 10-50x slower CPU ops
        if config.engine.threads:
            torch.set_num_threads(config.engine.threads)
        torch.manual_seed(config.seed)
        random.seed(config.seed)
        _setup_distributed(config)  # idempotent; also for callers that skip run()
        self.rank, self.world = rank(), world_size()
        self.main = self.rank == 0
        if self.main:
            run_dir.mkdir(parents=True, exist_ok=True)
        self.device = pick_device(config.engine.device)
        self.task = build_task(config.task, config.eval.split)  # first: a missing dataset fails fast
        model, self.tok = load_model(config)
        enc = self.encode
        self.train_prompts = [enc(p.prompt) for p in self.task.train]
        n_eval = config.eval.num_prompts or config.task.num_eval_prompts
        self.eval_problems = self.task.eval[:n_eval]
        self.eval_prompts = [enc(p.prompt) for p in self.eval_problems]
        self.engine = make_engine(config, model.to(self.device))
        self.device = getattr(self.engine, "device", self.device)
        self.rank, self.world = rank(), world_size()  # single-process DeepSpeed: a world of 1
        self.main = self.rank == 0
        self.model = self.engine.model
        self.model.eval()  # train() only around the update (gradient checkpointing, dropout)
        self.zero3 = config.engine.type == "deepspeed" and config.engine.zero_stage == 3
        self.head = LMHead(self.model.get_output_embeddings(), config.precision.trainer_lm_head_fp32)
        self.body = self.model.get_decoder()
        # ZeRO-3 leaves each rank an empty shard per parameter; ds_numel is the full size.
        self.n_params = sum(getattr(p, "ds_numel", p.numel()) for p in self.model.parameters())
        self.pool = PromptPool([p.difficulty for p in self.task.train], config.data, config.seed)
        self.step = 0
        self.counters = new_counters()
        self.acc: dict[str, float] = {}
        self._resume()
        self.ctx = Context(config, self.model, self.tok, self.pool, self.train_prompts,
                           self.counters["gen_counter"], getattr(self, "source_state", None))

    @property
    def encode(self):
        """Prompt text -> ids; real chat models get their chat template (model.chat_template)."""
        return prompt_encoder(self.tok, self.c.model.chat_template)

    # -- the loop ------------------------------------------------------------------------
    def status(self, state: str) -> None:
        """status.json (rank 0): state, step, progress, and the run's preemption record
        (`preemptions`: over all attempts, per stop signal the step rank 0 was working on when
        it arrived and the step checkpointed at; `resumed_from`: the checkpoint step this
        attempt started from)."""
        if self.main:
            rundir.write_status(self.dir, state, self.step, total_steps=self.c.budget.steps,
                                progress=round(self.budget_fraction(), 4),
                                **getattr(self, "notes", {}))

    def train(self) -> None:
        """The loop: first eval, then per step generate -> train -> push weights -> maybe eval
        and checkpoint, until the budget is spent or a stop signal asks for a requeue. Evals
        are launched, not waited for (trainer/loop/eval_point.py); the run is done when their
        lines are written. A stop signal inside generation abandons the step in flight."""
        c = self.c
        self.start_attempt()
        self.status("running")
        source = MODES.get(c.off_policy.mode)(self.ctx)
        mark, closed = None, []

        def close() -> None:  # once: the eval worker, then the engine it may be using
            if not closed:
                closed.append(True)
                self.close_evals()
                source.close()

        try:
            if not self.resumed:
                self.evaluate(source)  # launched; decoded beside training (eval_service.py)
                self.checkpoint()
            source.after_step(self.model, self.step)  # resumed: stamp generator with this version
            self.redo_evals(source)  # evals a stop or a kill ended, on their step's weights
            while not self.budget_spent():
                t0 = time.perf_counter()
                preempt.at_step(self.step + 1)
                mark = self.step_mark()
                batch = self.next_batch(source)  # rank 0's data everywhere, or its stop
                self.train_step(batch)
                self.step += 1
                source.after_step(self.model, self.step)
                self.counters["wall"] += time.perf_counter() - t0
                self.status("running")
                last = self.budget_spent()
                stop, timely = self.boundary_flags()
                if c.eval.due(self.step) or last:
                    self.evaluate(source)
                    self.checkpoint()
                elif self.step % c.checkpoint.every_steps == 0 or timely or stop:
                    self.checkpoint()
                if stop and not last:  # saved at this boundary; the launcher requeues
                    self.stop_for_preemption()
                    return
            if self.main:
                self.finish_evals()  # training is over: only rank 0 waits, for the last lines
        except preempt.Stopped:  # inside generation, or an eval at the end: every rank
            close()  # the generator thread stops drawing from the pool before it is restored
            self.abandon_step(mark if self.step_marked(mark) else None)
            return
        finally:
            close()
        self.status("done")

    def step_mark(self) -> tuple:
        """What a step changes before its update (the pool's draws, the generation counter,
        the RNGs): restored if the step is abandoned, so its checkpoint is the finished step's."""
        return (self.step, self.pool.state_dict(), self.ctx.gen_counter,
                torch.get_rng_state(), random.getstate())

    def step_marked(self, mark) -> bool:
        return mark is not None and mark[0] == self.step

    def next_batch(self, source):
        """The step's batch: rank 0's, broadcast, or each node's share joined (pipeline mode
        with vLLM on several nodes: trainer/generation/feeders.py). A stop signal inside a
        feeder's generation (trainer/preempt.py Stopped; from the pipeline's generator thread
        it arrives as the cause of its failure) is sent instead, and every rank raises Stopped."""
        try:
            mine = source.next(self.step)
        except preempt.Stopped:
            mine = preempt.STOP
        except RuntimeError as e:
            if not isinstance(e.__cause__, preempt.Stopped):
                raise
            mine = preempt.STOP
        feeders = getattr(source, "feeders", None)
        got = step_batch(mine, feeders.ranks if feeders else (0,), preempt.STOP, concat)
        if isinstance(got, str) and got == preempt.STOP:
            raise preempt.Stopped("stop signal inside generation")
        return got

    def abandon_step(self, mark) -> None:
        """A stop signal inside a step (every rank): put back what the step drew, checkpoint
        the last finished step unless that is saved already, record the stop."""
        if mark is not None:
            _, pool, gen_counter, trng, prng = mark
            self.pool.load_state_dict(pool)
            self.ctx.gen_counter = gen_counter
            torch.set_rng_state(trng)
            random.setstate(prng)
        if self.saved[0] != self.step:
            self.checkpoint()
        self.stop_for_preemption()

    def train_step(self, batch) -> None:
        """One optimizer step on one batch of rollouts; its statistics join the running
        means that the next metrics line reports."""
        correct, rewards = self.reward(batch)
        rows, dropped = self.keep_rows(batch, rewards)
        self.count_generation(batch)
        stats = self.rollout_stats(batch, correct, rewards, rows, dropped)
        if rows:
            stats.update(self.update(batch.rollout, rows, rewards))
        for k, v in stats.items():
            self.acc[k] = self.acc.get(k, 0.0) + v
            self.acc["n/" + k] = self.acc.get("n/" + k, 0) + 1

    def reward(self, batch) -> tuple[list[bool], list[float]]:
        """Verdict and reward of every sample: the verifiable reward plus the length
        control's penalty. Each prompt's pass count feeds the pool (curriculum, NPR)."""
        c, ro, G = self.c, batch.rollout, self.c.rollout.generations_per_prompt
        correct = score(self.task, [self.task.train[i] for i in batch.prompt_ids], self.tok,
                        ro.tokens, G)
        rewards = [(c.reward.correct if ok else c.reward.incorrect) + pen
                   for ok, pen in zip(correct, ro.penalty)]
        for j, pid in enumerate(batch.prompt_ids):
            self.pool.record(pid, sum(correct[j * G:(j + 1) * G]), G)
        return correct, rewards

    def keep_rows(self, batch, rewards: list[float]) -> tuple[list[int], int]:
        """Rows of the prompt groups the zero-variance filter keeps (groups whose samples
        all got the same reward carry no gradient), and how many groups it dropped."""
        G = self.c.rollout.generations_per_prompt
        keep = zero_variance_keep(rewards, G, self.c.data.zero_variance_filter)
        dropped = len(batch.prompt_ids) - len(keep)
        self.counters["zero_variance_dropped"] += dropped
        return [j * G + s for j in keep for s in range(G)], dropped

