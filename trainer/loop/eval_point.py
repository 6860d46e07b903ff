"""The curve's points: the periodic evaluation and the metrics row it writes, and the per-step
rollout statistics whose means over the eval window join that row.

Why a module of its own: the row is the run's output contract (trainer/rundir.py names its
columns; every line has at least REQUIRED_COLUMNS), so what goes into it is read in one place.
`_Run` (trainer/loop/train.py) mixes this class in; the methods use the run's `c`, `dir`, `main`,
`zero3`, `model`, `tok`, `task`, `eval_problems`, `eval_prompts`, `pool`, `step`, `counters`
and `acc` (running sums of step statistics, with "n/<key>" counts), and keep
`lag_max_window`.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Optional

import torch

from trainer import rundir, trackers
from trainer.generation import eval_service
from trainer.evaluate import pass_rate
from trainer.generation.rollout import HFGenerator
from trainer.generation.service import make_service


class EvalPoint:
    """Evaluation and metrics rows of `_Run` (see the module doc)."""

    def rollout_stats(self, batch, correct: list[bool], rewards: list[float], rows: list[int],
                      dropped: int) -> dict[str, float]:
        """The step's rollout statistics: reward, pass rate, truncation, interruption, length,
        the zero-variance filter's share, generation time and (when the tokens carry policy
        versions) the off-policy lag."""
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
            # (evaluate() reports it), lag_mean the mean of the steps' token means.
            lag_max = self.step - min(vers)
            stats[rundir.LAG_MEAN] = self.step - sum(vers) / len(vers)
            self.lag_max_window = max(getattr(self, "lag_max_window", 0), lag_max)
            stats[rundir.STALENESS_MEAN] = stats[rundir.LAG_MEAN]  # earlier names
            stats[rundir.STALENESS_MAX] = lag_max
        return stats

    @torch.no_grad()
    def evaluate(self, source=None) -> None:
        """mean@k on the held-out prompts at this step: one metrics line (the curve's point).

        Launched here, decoded beside training, written when done (generation/eval_service.py
        EvalWorker): the line carries this step's counters, taken now; training ranks never
        wait for it. rollout.backend vllm: through the rollout source's engine, brought up to
        the trainer's weights first (every rank joins a ZeRO-3 push's gathers); hf: a model
        copy of rank 0's loads a snapshot of this step's weights. Only hf under ZeRO-3 stays
        synchronous: each rank holds a shard, so every rank runs the same evaluation, the
        sampler decoding in lockstep (trainer/generation/rollout.py `synced`)."""
        row = self.metrics_row(None, source)
        self.acc = {}
        self.launch_eval(self.step, row, source, self.step_weights(source))

    def step_weights(self, source) -> Optional[dict]:
        """What fixes this step's weights for its eval: hf, a snapshot (rank 0; cloned now,
        the trainer moves on); vllm, the engine brought up to date (every rank: a push under
        ZeRO-3 is collective) and None."""
        if eval_service.uses_service(self.c, source):
            eval_service.bring_up_to_date(eval_service.service_generator(source), self.model,
                                          self.step, self.zero3)
            return None
        if self.main and not self.zero3:
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        return None

    def launch_eval(self, step: int, row: dict, source, weights: Optional[dict],
                    done: Optional[dict] = None) -> None:
        """Hand the eval of `step` (its row, its weights, the chunks a checkpoint says are
        done) to rank 0's worker; hf under ZeRO-3 evaluates now, on every rank."""
        if self.c.rollout.backend == "hf" and self.zero3:
            gen = HFGenerator(self.c, self.model, self.tok)  # the trainer's current weights
            t0 = time.perf_counter()
            pr = self._pass_rate(gen)
            if self.main:
                self.write_row({**row, rundir.PASS_RATE: pr,
                                eval_service.EVAL_SECONDS: time.perf_counter() - t0})
            return
        if not self.main:
            return
        if getattr(self, "evals", None) is None:
            self.evals = eval_service.EvalWorker(self._make_eval(source), self.write_row)
        self.evals.submit(eval_service.EvalJob(step, row, weights, dict(done or {})))

    def _make_eval(self, source) -> Callable:
        """The worker's job runner (rank 0), on a generation service of its own
        (trainer/generation/service.py): over the rollout source's engine (vllm), or over an
        hf model copy made now, in the trainer thread (a copy taken while the trainer
        updates would be torn), into which each job pushes its step's snapshot first."""
        c = self.c
        if eval_service.uses_service(c, source):
            gen = eval_service.service_generator(source)
            if gen is None:  # the sources give rank 0 a generator: one that does not is a bug
                raise RuntimeError(f"eval through the generation service: the "
                                   f"{type(source).__name__} source holds no generator on rank 0")
            svc = make_service(gen, c, self.tok, name="ablate-eval")

            def chunks(job):
                return eval_service.engine_chunks(self.eval_prompts, c, self.tok, self.eval_seed)
            all_at_once = eval_service.cpu_queue_limit() is None
        else:
            svc = make_service(HFGenerator(c, self.model, self.tok, own_copy=True), c, self.tok,
                               name="ablate-eval")

            def chunks(job):
                svc.push_weights(job.weights, job.step)  # ordered before this job's requests
                return eval_service.hf_chunks(len(self.eval_prompts), c, self.eval_seed)
            all_at_once = False
        self.eval_services = getattr(self, "eval_services", []) + [svc]

        def run(job) -> tuple[float, dict]:
            todo = chunks(job)
            if job.done:
                print(f"[trainer] eval of step {job.step} resumes: {len(job.done)} of "
                      f"{len(todo)} chunks done", file=sys.stderr, flush=True)
            return eval_service.service_eval(svc, job.step, todo, self.task,
                                             self.eval_problems, self.eval_prompts, c, self.tok,
                                             done=job.done, all_at_once=all_at_once)
        return run

    @property
    def eval_seed(self) -> int:
        """The eval's own seed (never the rollouts' RNG stream: each call seeds a generator)."""
        return self.c.seed * 7919 + 17

    def _pass_rate(self, gen) -> float:
        c = self.c
        return pass_rate(gen, self.task, self.eval_problems, self.eval_prompts, c, self.tok,
                         seed=self.eval_seed, k=c.eval.samples_per_prompt,
                         temperature=c.eval.temperature, batch_rows=c.eval.batch_size)

    def write_row(self, row: dict) -> None:
        """Append a finished eval's line (rank 0; the worker thread, or the loop under ZeRO-3)."""
        rundir.append_metrics(self.dir, row)
        trackers.log_metrics(self.c, self.dir, row)  # TensorBoard / W&B / MLflow, if chosen

    def redo_evals(self, source) -> None:
        """On resume: launch again the evals the checkpoint lists as not written (a stop or a
        kill ended them), in step order, on their step's weights: the resumed model's for the
        checkpoint's own step, the snapshot the checkpoint kept for an earlier one (hf). The
        vllm engine holds one set of weights: an earlier step's eval is redone on the
        resumed weights, and its row says so (eval/weights_step). An eval the checkpoint
        saved progress for decodes only its remaining chunks (EvalJob.done)."""
        for step, row, weights, done in self.resume_evals:
            if weights is None:  # every rank alike (the list is rank 0's, broadcast)
                if step != self.step:
                    row = {**row, eval_service.EVAL_WEIGHTS_STEP: self.step}
                weights = self.step_weights(source)
            self.launch_eval(step, row, source, weights, done)
        self.resume_evals = []

    def finish_evals(self) -> None:
        """End of the run (rank 0): wait for the launched evals' lines."""
        if getattr(self, "evals", None) is not None:
            self.evals.drain()

    def close_evals(self) -> None:
        """Stop the eval worker, then its generation service (never the engine: the rollout
        source owns it)."""
        if getattr(self, "evals", None) is not None:
            self.evals.close()
        for svc in getattr(self, "eval_services", []):
            svc.stop()
        self.eval_services = []

    def metrics_row(self, pass_rate_: Optional[float], source) -> dict:
        """One metrics line: the required columns, the counters behind them, the means of the
        step statistics since the last line, the window's max lag and the source's record."""
        k_ = self.counters
        row = {rundir.STEP: self.step, rundir.SAMPLES: k_["samples"],
               rundir.TOKENS: k_["tokens"], rundir.FLOPS: k_["flops_gen"] + k_["flops_train"],
               rundir.GPU_HOURS: self.gpu_hours(), rundir.PASS_RATE: pass_rate_,
               rundir.FLOPS_GENERATION: k_["flops_gen"], rundir.FLOPS_TRAINING: k_["flops_train"],
               rundir.ZERO_VARIANCE_DROPPED: k_["zero_variance_dropped"],
               rundir.NPR_RETIRED: len(self.pool.retired), rundir.EPOCH: self.pool.epoch,
               rundir.WALL_S: k_["wall"]}
        for key in [x for x in self.acc if not x.startswith("n/")]:
            row[key] = self.acc[key] / self.acc["n/" + key]
        if rundir.LAG_MEAN in row:
            row[rundir.LAG_MAX] = self.__dict__.pop("lag_max_window", 0)
        if source is not None and hasattr(source, "stale_dropped"):
            row[rundir.STALE_DROPPED] = source.stale_dropped
            row[rundir.WAIT_S] = source.wait_seconds
        return row
