"""The curve's points: the periodic evaluation and the metrics row it writes, and the per-step
rollout statistics whose means over the eval window join that row.

Why a module of its own: the row is the run's output contract (trainer/rundir.py names its
columns; every line has at least REQUIRED_COLUMNS), so what goes into it is read in one place.
`_Run` (trainer/loop.py) mixes this class in; the methods use the run's `c`, `dir`, `main`,
`zero3`, `model`, `tok`, `task`, `eval_problems`, `eval_prompts`, `pool`, `step`, `counters`
and `acc` (running sums of step statistics, with "n/<key>" counts), and keep
`lag_max_window`.
"""

from __future__ import annotations

import torch

from trainer import rundir, trackers
from trainer.generation import eval_service
from trainer.evaluate import pass_rate
from trainer.generation.rollout import HFGenerator


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
        """mean@k on the held-out prompts; writes one metrics line (the curve's point).

        rollout.backend vllm: through the rollout source's engine, brought up to the trainer's
        weights first; rank 0 alone evaluates (trainer/generation/eval_service.py). hf: the built-in
        sampler on the trainer's weights in eval.batch_size batches. Rank 0 alone evaluates (the
        weights are identical everywhere), except under ZeRO-3 where each rank holds a shard:
        there every rank runs the same evaluation, the sampler decoding in lockstep so the
        per-forward all-gathers line up (trainer/generation/rollout.py `synced`)."""
        c, seed = self.c, self.c.seed * 7919 + 17
        if eval_service.uses_service(c, source):  # None on ranks other than 0
            pr = eval_service.eval_pass_rate(source, self.model, self.step, self.zero3, self.task,
                                            self.eval_problems, self.eval_prompts, c, self.tok,
                                            seed=seed)
        elif self.main or self.zero3:
            gen = HFGenerator(c, self.model, self.tok)  # the trainer's current weights
            was = self.model.training
            self.model.eval()
            pr = pass_rate(gen, self.task, self.eval_problems, self.eval_prompts, c, self.tok,
                           seed=seed, k=c.eval.samples_per_prompt,
                           temperature=c.eval.temperature, batch_rows=c.eval.batch_size)
            self.model.train(was)
        else:
            pr = None
        if pr is None:
            self.acc = {}
            return
        row = self.metrics_row(pr, source)
        self.acc = {}
        if self.main:
            rundir.append_metrics(self.dir, row)
            trackers.log_metrics(c, self.dir, row)  # TensorBoard / W&B / MLflow, if chosen

    def metrics_row(self, pass_rate_: float, source) -> dict:
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
