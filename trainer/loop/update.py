"""The policy update of one training step: advantages -> loss batches -> forward -> policy
loss -> one optimizer step, and the step's loss statistics.

Why a module of its own: this is the math of the step (how rows are dealt to ranks, split into
micro-batches, padded, weighted and reduced), and it reads best apart from the loop's order of
stages (trainer/loop/train.py calls it with each step's kept rows). It holds the run's fixed
parts it trains with (trainer/loop/setup.py Parts) and returns what the step did: its
statistics, and the tokens and FLOPs the run's counters add (trainer/loop/state.py).

Multi-process: the kept prompt groups are dealt out to the ranks by tokens, and each rank's
rows split into micro-batches of engine.micro_batch_tokens; every token's loss weight carries
the whole batch's aggregation denominators (times the world size), so the accumulated,
rank-averaged gradient equals the single-process gradient of the whole batch
(trainer/loop/microbatch.py); a rank dealt no group still steps on a zero-weighted group, and ranks
run equally many micro-batches, so collectives line up.

A stop signal (trainer/dist/preempt.py) is honoured between micro-batches: before each one the
ranks agree on the flag (one all-reduce), so every rank stops at the same micro-batch and the
step is dropped (preempt.Stopped; trainer/loop/train.py abandon_step checkpoints the last
finished step). Nothing the checkpoint holds has changed by then: the step's one optimizer step
comes after the last micro-batch, and the gradients accumulated so far are in no checkpoint
(the torch engine saves weights, optimizer and scheduler; DeepSpeed also its step counters,
which only step() advances) and die with the process, which stops after the save.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from trainer import rundir as col
from trainer.algo.advantages import compute_advantages
from trainer.config import TrainConfig
from trainer.dist import preempt
from trainer.dist.groups import all_reduce_floats
from trainer.loop.setup import Parts
from trainer.models.logprobs import (
    completion_logprobs,
    pack,
    pack_right,
    right_padded_logprobs,
    shared_prefix_logprobs,
)
from trainer.algo.losses import LOSSES, LossStats, policy_loss_and_stats
from trainer.loop.microbatch import StepTotals, deal_groups, plan_micro_batches, rows_token_weights


class Diverged(Exception):
    """A non-finite loss or grad norm at optimizer step `step` (1-based: the step that failed)."""

    def __init__(self, step: int) -> None:
        super().__init__(f"non-finite loss or grad at step {step}")
        self.step = step


@dataclass
class LossBatch:
    """The kept rows of a rollout as padded tensors for the policy loss."""

    rows: list[int]  # rollout rows, in batch order
    packed: dict  # trainer.models.logprobs.pack / pack_right: input_ids, attention_mask, mask, P
    mask: torch.Tensor  # [B, T] completion tokens the loss counts
    old_logp: torch.Tensor  # [B, T] behaviour log-probs (the sampler's)
    group: torch.Tensor  # [B] prompt group of each row
    adv: torch.Tensor  # [B] advantage of each row
    weight: torch.Tensor  # [B, T] each token's weight in the whole batch's loss (microbatch.py)


@dataclass
class Trained:
    """What one update did: its statistics for the metrics row, and what it adds to the
    run's counters (prompt + completion tokens trained on, and the FLOPs the forwards and
    backwards computed, all ranks)."""

    stats: dict[str, float]
    tokens: int
    flops: float


class PolicyUpdate:
    """The update stage of the loop (see the module doc)."""

    def __init__(self, config: TrainConfig, parts: Parts) -> None:
        self.c, self.engine, self.model = config, parts.engine, parts.model
        self.body, self.head, self.tok = parts.body, parts.head, parts.tok
        self.device = parts.device
        self.rank, self.world, self.n_params = parts.rank, parts.world, parts.n_params

    def __call__(self, ro, rows: list[int], rewards: list[float], step: int) -> Trained:
        """Advantages -> policy loss -> one optimizer step (step + 1) on the kept samples:
        this rank's share of them (groups dealt by tokens), in micro-batches of at most
        engine.micro_batch_tokens whose gradients accumulate into the one step, each token
        weighted with the whole batch's denominators (trainer/loop/microbatch.py)."""
        adv_of = self.advantages(rows, rewards)
        weight_of = rows_token_weights(ro, rows, self.c.rollout.generations_per_prompt,
                                       self.c.loss.aggregation, self.world)
        mine, real = self.my_share(ro, rows)
        micro = self.micro_batches(ro, mine)
        totals = StepTotals()
        self.model.train()  # HF gradient checkpointing (and dropout) act only in train mode
        try:
            for i, (mb, live) in enumerate(micro):
                if preempt.agreed(self.device):  # every rank at the same micro-batch
                    raise preempt.Stopped(f"stop signal inside the update (micro-batch {i})")
                b = self.loss_batch(ro, mb, adv_of, weight_of if real and live else None)
                logp, ent, n_proc = self.forward(ro, b)
                loss, st, mismatch = self.policy_loss(logp, b, step)
                self.engine.backward(loss, boundary=i == len(micro) - 1)
                if real and live:  # a zero-weighted line-up micro-batch counts for nothing
                    totals.add(float(loss.detach()), b.mask, ent, mismatch, st.ratio,
                               st.clipped, float(b.packed["attention_mask"].sum()),
                               float(b.packed["attention_mask"].numel()), n_proc)
            gnorm = self.engine.step()
        finally:
            self.model.eval()
        if not math.isfinite(gnorm):
            raise Diverged(step + 1)
        trained = self.count_and_average(totals, real, len(micro))
        trained.stats.update({col.GRAD_NORM: gnorm, col.LR: self.engine.lr()})
        return trained

    def advantages(self, rows: list[int], rewards: list[float]) -> dict[int, float]:
        """Advantage of each kept row, normalized over the whole kept batch (every rank
        computes all of them: batch normalization needs the whole batch)."""
        c, G = self.c, self.c.rollout.generations_per_prompt
        adv = compute_advantages(torch.tensor([rewards[r] for r in rows]),
                                 torch.tensor([r // G for r in rows]),
                                 normalization=c.advantage.normalization, eps=c.advantage.eps)
        return dict(zip(rows, adv.tolist()))

    def my_share(self, ro, rows: list[int]) -> tuple[list[int], bool]:
        """This rank's rows (all of them in one process) and whether they are its own: prompt
        groups are dealt so that ranks carry about equal tokens; a rank dealt none borrows a
        group and trains on it with zero weight (collectives must line up)."""
        if self.world == 1:
            return rows, True
        G = self.c.rollout.generations_per_prompt
        size: dict[int, int] = {}
        for r in rows:
            size[r // G] = size.get(r // G, 0) + len(ro.prompts[r]) + len(ro.tokens[r])
        mine = set(deal_groups(size, self.world)[self.rank])
        if not mine:
            return [r for r in rows if r // G == rows[0] // G], False
        return [r for r in rows if r // G in mine], True

    def micro_batches(self, ro, rows: list[int]) -> list[tuple[list[int], bool]]:
        """`rows` length-bucketed into micro-batches of at most engine.micro_batch_tokens
        padded tokens, each with whether it is live. Every rank runs as many as the rank with
        most (DeepSpeed's collectives run per forward/backward): the others add zero-weighted
        repeats of their longest row."""
        G = self.c.rollout.generations_per_prompt
        lengths = [(len(ro.prompts[r]), len(ro.tokens[r])) for r in rows]
        plan = [([rows[i] for i in mb], True) for mb in plan_micro_batches(
            lengths, self.c.engine.micro_batch_tokens, [r // G for r in rows])]
        most = int(all_reduce_floats([float(len(plan))], self.device, "max")[0])
        return plan + [(plan[0][0][:1], False)] * (most - len(plan))

    def loss_batch(self, ro, rows: list[int], adv_of: dict[int, float],
                   weight_of: dict[int, torch.Tensor] | None) -> LossBatch:
        """The rows padded into tensors: prompt+completion ids, the loss mask (completion
        tokens the loss counts), behaviour log-probs, prompt group and advantage of each row,
        and each token's weight in the loss (`weight_of`; None: all zero)."""
        G = self.c.rollout.generations_per_prompt
        # Micro-batches: rows back to back, right-padded (their padding is what bucketing
        # bounds); one batch: prompts left-padded, completions aligned (shared-prefix forward).
        packer = pack if self.c.engine.micro_batch_tokens is None else pack_right
        packed = packer([ro.prompts[r] for r in rows], [ro.tokens[r] for r in rows],
                        self.tok.pad_token_id)
        T = packed["mask"].shape[1]
        mask = packed["mask"].clone()
        old = torch.zeros_like(mask)
        weight = torch.zeros(mask.shape, dtype=torch.float64)
        for i, r in enumerate(rows):
            n = len(ro.tokens[r])
            mask[i, :n] *= torch.tensor(ro.loss_mask[r], dtype=mask.dtype)
            old[i, :n] = torch.tensor(ro.logprobs[r][:T])
            if weight_of is not None:
                weight[i, :n] = weight_of[r][:T]
        return LossBatch(rows, packed, mask, old, torch.tensor([r // G for r in rows]),
                         torch.tensor([adv_of[r] for r in rows], dtype=torch.float32), weight)

    def forward(self, ro, b: LossBatch) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Log-probs and entropies of the completion tokens under the current weights, and
        the number of token positions the forward processed (for the FLOPs count).

        With micro-batches (engine.micro_batch_tokens) every row runs whole, back to back
        (trainer.models.logprobs.pack_right): the shared-prefix forward is replaced there, since
        bucketing by length puts a prompt's samples in different micro-batches anyway."""
        c, G, rows = self.c, self.c.rollout.generations_per_prompt, b.rows
        if "start" in b.packed:  # pack_right
            logp, ent = right_padded_logprobs(self.body, self.head, b.packed, self.device,
                                              c.precision.dtype, c.rollout.temperature,
                                              with_entropy=True)
            return logp, ent, int(b.packed["attention_mask"].sum())
        if c.model.gradient_checkpointing:  # recomputation and a grad-carrying KV cache clash
            logp, ent = completion_logprobs(self.body, self.head, b.packed, self.device,
                                            c.precision.dtype, c.rollout.temperature,
                                            with_entropy=True)
            return logp, ent, int(b.packed["attention_mask"].sum())
        # Each prompt's forward/backward shared by its G samples.
        kept = sorted({r // G for r in rows})
        slot = {g: i for i, g in enumerate(kept)}
        uniq = [ro.prompts[g * G] for g in kept]
        logp, ent = shared_prefix_logprobs(
            self.body, self.head, uniq, [slot[r // G] for r in rows], [ro.tokens[r] for r in rows],
            self.tok.pad_token_id, self.device, c.precision.dtype, c.rollout.temperature,
            with_entropy=True)
        n_proc = sum(len(p) for p in uniq) + sum(max(len(ro.tokens[r]) - 1, 0) for r in rows)
        return logp, ent, n_proc

    def policy_loss(self, logp: torch.Tensor, b: LossBatch,
                    step: int) -> tuple[torch.Tensor, LossStats, torch.Tensor]:
        """This micro-batch's part of the whole batch's loss: the configured loss type's
        per-token terms weighted by `b.weight` (the aggregation's, whole-batch denominators,
        trainer/loop/microbatch.py), its stats, and each token's |old - new| log-prob. A non-finite loss on any rank stops the run on every rank,
        before anyone enters the engine's collectives."""
        dev, cfg = self.device, self.c.loss
        options = {k: getattr(cfg, k) for k in LOSSES.options(cfg.type)}  # None: the default
        b.mask, b.old_logp = b.mask.to(dev), b.old_logp.to(dev)
        loss, st = policy_loss_and_stats(logp, b.old_logp, b.adv.to(dev), b.mask,
                                         b.weight.to(dev), loss_type=cfg.type, **options)
        if all_reduce_floats([float(not torch.isfinite(loss))], dev, "max")[0]:
            raise Diverged(step + 1)
        with torch.no_grad():
            mismatch = (b.old_logp - logp.detach()).abs()
        return loss, st, mismatch

    def count_and_average(self, t: StepTotals, real: bool, n_micro: int) -> Trained:
        """The step's tokens and training FLOPs (all ranks), and its loss statistics: the loss
        sums to the global one, the rest is the mean over ranks that trained on real data;
        padding share, micro-batches, and (several ranks) the max/mean ratio of the ranks'
        tokens."""
        dev = self.device
        tokens, flops, slots = all_reduce_floats(
            [t.tokens, 6.0 * self.n_params * t.processed, t.slots], dev)
        m = max(t.loss_tokens, 1.0)
        means = {col.LOSS: t.loss, col.ENTROPY: t.entropy / m, col.IS_RATIO_MEAN: t.ratio / m,
                 col.CLIP_FRAC: t.clipped / m, col.LOGPROB_MISMATCH: t.mismatch / m}
        out = {col.PADDING_FRAC: 1.0 - tokens / max(slots, 1.0),
               col.MICRO_BATCHES: float(n_micro)}
        if self.world > 1:
            n_real = all_reduce_floats([float(real)], dev)[0]
            vals = all_reduce_floats([v * (real or k == col.LOSS) for k, v in means.items()], dev)
            means = {k: v / (self.world if k == col.LOSS else n_real)
                     for k, v in zip(means, vals)}
            top = all_reduce_floats([t.tokens], dev, "max")[0]
            out[col.RANK_TOKENS_MAX_OVER_MEAN] = top / max(tokens / self.world, 1.0)
        ratio_max = t.ratio_max if real and t.loss_tokens else 1.0
        ratio_max = all_reduce_floats([ratio_max if real else 0.0], dev, "max")[0]
        # tokens: prompt + completion per sample; flops: what was actually computed
        return Trained({**means, **out, col.IS_RATIO_MAX: ratio_max}, int(tokens), flops)
