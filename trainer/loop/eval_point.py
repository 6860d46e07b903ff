"""The curve's points: the periodic evaluation and the metrics row it writes, and the per-step
rollout statistics whose means over the eval window join that row.

Why a module of its own: the row is the run's output contract (trainer/rundir.py names its
columns; every line has at least REQUIRED_COLUMNS), so what goes into it is read in one place.
`rollout_stats` and `metrics_row` read the run's state (trainer/loop/state.py); `EvalPoint`
holds what evaluation needs of the run's fixed parts (trainer/loop/setup.py) and rank 0's eval
worker, which decodes beside training and writes each row when its eval is done.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from trainer import rundir, trackers
from trainer.config import TrainConfig
from trainer.evaluate import pass_rate
from trainer.generation import eval_service
from trainer.generation.rollout import HFGenerator
from trainer.generation.service import make_service
from trainer.loop.setup import Parts
from trainer.loop.state import TrainState


def rollout_stats(state: TrainState, batch, correct: list[bool], rewards: list[float],
                  rows: list[int], dropped: int) -> dict[str, float]:
    """The step's rollout statistics: reward, pass rate, truncation, interruption, length,
    the zero-variance filter's share, generation time and (when the tokens carry policy
    versions) the off-policy lag, whose max over the window the state's window keeps."""
    ro = batch.rollout
    stats = {
        rundir.REWARD: sum(rewards) / len(rewards),
        rundir.TRAIN_PASS_RATE: sum(correct) / len(correct),
        rundir.TRUNCATION_RATE: sum(not f for f in ro.finished) / len(ro.finished),
        rundir.INTERRUPT_RATE: sum(ro.interrupted) / len(ro.interrupted),
        rundir.RESPONSE_LEN: sum(len(t) for t in ro.tokens) / len(ro.tokens),
        rundir.ZERO_VARIANCE_DROPPED_FRAC: dropped / len(batch.prompt_ids),
        rundir.GENERATION_S: batch.gen_seconds,
    }
    vers = [v for r in rows for v in ro.versions[r]]  # policy version of each kept token
    if vers:
        # Lag: optimizer steps between the weights that sampled a token and the weights
        # it is trained on (0 = on-policy). lag_max is the max over the eval window
        # (the metrics row reports it), lag_mean the mean of the steps' token means.
        lag_max = state.step - min(vers)
        stats[rundir.LAG_MEAN] = state.step - sum(vers) / len(vers)
        state.window.note_lag(lag_max)
        stats[rundir.STALENESS_MEAN] = stats[rundir.LAG_MEAN]  # earlier names
        stats[rundir.STALENESS_MAX] = lag_max
    return stats


def metrics_row(state: TrainState, gpu_hours: float, source) -> dict:
    """One metrics line: the required columns, the counters behind them, the means of the
    step statistics since the last line, the window's max lag and the source's record. The
    window starts over (the next line averages the steps after this one)."""
    k, pool = state.counters, state.data.pool
    row = {rundir.STEP: state.step, rundir.SAMPLES: k.samples, rundir.TOKENS: k.tokens,
           rundir.FLOPS: k.flops_gen + k.flops_train, rundir.GPU_HOURS: gpu_hours,
           rundir.PASS_RATE: None, rundir.FLOPS_GENERATION: k.flops_gen,
           rundir.FLOPS_TRAINING: k.flops_train,
           rundir.ZERO_VARIANCE_DROPPED: k.zero_variance_dropped,
           rundir.NPR_RETIRED: len(pool.retired), rundir.EPOCH: pool.epoch,
           rundir.WALL_S: k.wall}
    row.update(state.window.means())
    if rundir.LAG_MEAN in row:
        row[rundir.LAG_MAX] = state.window.lag_max or 0
    if source is not None and hasattr(source, "stale_dropped"):  # the pipeline sources' record
        row[rundir.STALE_DROPPED] = source.stale_dropped
        row[rundir.WAIT_S] = source.wait_seconds
    state.window.clear()
    return row


class EvalPoint:
    """mean@k on the held-out prompts at a step: one metrics line (the curve's point).

    Launched, decoded beside training, written when done (generation/eval_service.py
    EvalWorker): the line carries its step's counters, taken at launch; training ranks never
    wait for it. rollout.backend vllm: through the rollout source's engine, brought up to the
    trainer's weights first (every rank joins a ZeRO-3 push's gathers); hf: a model copy of
    rank 0's loads a snapshot of the step's weights. Only hf under ZeRO-3 stays synchronous:
    each rank holds a shard, so every rank runs the same evaluation, the sampler decoding in
    lockstep (trainer/generation/rollout.py `synced`)."""

    def __init__(self, config: TrainConfig, run_dir: Path, parts: Parts) -> None:
        self.c, self.dir, self.parts = config, run_dir, parts
        self.worker: Optional[eval_service.EvalWorker] = None  # rank 0's, at its first eval
        self.services: list = []  # the worker's generation services (stopped at close)
        # rank 0: the eval held for every node's engines (trainer/loop/final_eval.py): the
        # step's while it decodes, or the run's last until the loop's end
        self.final: Optional[eval_service.EvalJob] = None
        self.on_row: Optional[Callable[[dict], None]] = None  # the run's rates (rates.py)

    @property
    def seed(self) -> int:
        """The eval's own seed (never the rollouts' RNG stream: each call seeds a generator)."""
        return self.c.seed * 7919 + 17

    @torch.no_grad()
    def step_weights(self, source, step: int) -> Optional[dict]:
        """What fixes a step's weights for its eval: hf, a snapshot (rank 0; cloned now,
        the trainer moves on); vllm, the engine brought up to date (every rank: a push under
        ZeRO-3 is collective) and None."""
        p = self.parts
        if eval_service.uses_service(self.c, source):
            gen = eval_service.service_generator(source)
            eval_service.wait_for_engines(gen)  # rank 0: an engine this eval can pin
            eval_service.bring_up_to_date(gen, p.model, step, p.zero3)
            return None
        if p.main and not p.zero3:
            return {k: v.detach().clone() for k, v in p.model.state_dict().items()}
        return None

    @torch.no_grad()
    def launch(self, step: int, row: dict, source, weights: Optional[dict],
               done: Optional[dict] = None, final: bool = False) -> None:
        """Hand the eval of `step` (its row, its weights, the chunks a checkpoint says are
        done) to rank 0's worker; hf under ZeRO-3 evaluates now, on every rank. Where it can
        spread over several nodes' engines (trainer/loop/final_eval.py) it is decoded there
        now, rollouts paused, training waiting (every rank); the run's last (`final`) is held
        for the end of the run, when generation has stopped."""
        from trainer.loop import final_eval

        c, p = self.c, self.parts
        if final_eval.spread(c, source) is not None:
            if p.main:
                self.final = eval_service.EvalJob(step, row, weights, dict(done or {}))
            if not final:
                final_eval.finish(self, source)  # a stop: preempt.Stopped, its chunks kept
            return
        if c.rollout.backend == "hf" and p.zero3:
            gen = HFGenerator(c, p.model, p.tok)  # the trainer's current weights
            t0 = time.perf_counter()
            pr = pass_rate(gen, p.task, p.eval_problems, p.eval_prompts, c, p.tok,
                           seed=self.seed, k=c.eval.samples_per_prompt,
                           temperature=c.eval.temperature, batch_rows=c.eval.batch_size)
            if p.main:
                self.write_row({**row, rundir.PASS_RATE: pr,
                                eval_service.EVAL_SECONDS: time.perf_counter() - t0})
            return
        if not p.main:
            return
        if self.worker is None:
            self.worker = eval_service.EvalWorker(self._runner(source), self.write_row)
        pin = None  # vllm: engines held at this step's weights now, before the next push
        if eval_service.uses_service(c, source):
            pin = eval_service.pin_for_eval(eval_service.service_generator(source))
        self.worker.submit(eval_service.EvalJob(step, row, weights, dict(done or {}), pin=pin))

    def _runner(self, source) -> Callable:
        """The worker's job runner (rank 0), on a generation service of its own
        (trainer/generation/service.py): over the rollout source's engine (vllm), or over an
        hf model copy made now, in the trainer thread (a copy taken while the trainer
        updates would be torn), into which each job pushes its step's snapshot first."""
        c, p = self.c, self.parts
        if eval_service.uses_service(c, source):
            gen = eval_service.service_generator(source)
            if gen is None:  # the sources give rank 0 a generator: one that does not is a bug
                raise RuntimeError(f"eval through the generation service: the "
                                   f"{type(source).__name__} source holds no generator on rank 0")
            svc = make_service(gen, c, p.tok, name="ablate-eval")

            def chunks(job):
                if job.pin is None:  # none could be pinned at launch: the first that can
                    job.pin = eval_service.pin_for_eval(gen, poll_s=0.5)
                return eval_service.engine_chunks(p.eval_prompts, c, p.tok, self.seed)
            all_at_once = eval_service.cpu_queue_limit() is None
        else:
            svc = make_service(HFGenerator(c, p.model, p.tok, own_copy=True), c, p.tok,
                               name="ablate-eval")

            def chunks(job):
                svc.push_weights(job.weights, job.step)  # ordered before this job's requests
                return eval_service.hf_chunks(len(p.eval_prompts), c, self.seed)
            all_at_once = False
        self.services.append(svc)

        def run(job) -> tuple[float, dict]:
            todo = chunks(job)
            if job.done:
                print(f"[trainer] eval of step {job.step} resumes: {len(job.done)} of "
                      f"{len(todo)} chunks done", file=sys.stderr, flush=True)
            try:
                return eval_service.pinned_eval(svc, job, todo, p.task, p.eval_problems,
                                                p.eval_prompts, c, p.tok, all_at_once)
            finally:
                if job.pin is not None:  # its engines rejoin the rollouts at the next push
                    eval_service.service_generator(source).pins.release(job.pin)
        return run

    def write_row(self, row: dict) -> None:
        """Append a finished eval's line (rank 0; the worker thread, or the loop under ZeRO-3)."""
        rundir.append_metrics(self.dir, row)
        trackers.log_metrics(self.c, self.dir, row)  # TensorBoard / W&B / MLflow, if chosen
        if self.on_row is not None:
            self.on_row(row)

    def redo(self, evals: list[tuple[int, dict, Optional[dict], dict]], step: int,
             source, final: bool = False) -> None:
        """On resume: launch again the evals the checkpoint lists as not written (a stop or a
        kill ended them), in step order, on their step's weights: the resumed model's for the
        checkpoint's own step, the snapshot the checkpoint kept for an earlier one (hf). The
        vllm engine holds one set of weights: an earlier step's eval is redone on the
        resumed weights, and its row says so (eval/weights_step). An eval the checkpoint
        saved progress for decodes only its remaining chunks (EvalJob.done). `final`: the
        run's budget is spent, so the checkpoint's own step's eval is the last (launch)."""
        for eval_step, row, weights, done in evals:
            if weights is None:  # every rank alike (the list is rank 0's, broadcast)
                if eval_step != step:
                    row = {**row, eval_service.EVAL_WEIGHTS_STEP: step}
                weights = self.step_weights(source, step)
            self.launch(eval_step, row, source, weights, done,
                        final=final and eval_step == step)

    def pending(self) -> list:
        """The launched evals whose lines are not written yet (rank 0's worker's jobs, and
        the last eval held for every node's engines): what a checkpoint keeps."""
        jobs = self.worker.pending() if self.worker is not None else []
        return jobs + ([self.final] if self.final is not None else [])

    def failed(self) -> Optional[BaseException]:
        """The worker's error, if it failed."""
        return self.worker.failed() if self.worker is not None else None

    def finish(self) -> None:
        """End of the run (rank 0): wait for the launched evals' lines."""
        if self.worker is not None:
            self.worker.drain()

    def close(self) -> None:
        """Stop the eval worker, then its generation services (never the engine: the rollout
        source owns it)."""
        if self.worker is not None:
            self.worker.close()
        for svc in self.services:
            svc.stop()
        self.services = []
