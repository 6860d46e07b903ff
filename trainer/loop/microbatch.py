"""Micro-batching by tokens: which rows each rank trains on, in which micro-batches, and with
what weight each of their tokens enters the loss.

Why: one forward/backward over a rank's whole share holds every activation of the step at once
and pads every row to the longest; an RL batch at 16k context (16 samples x ~14k tokens per
prompt group) does not fit a GPU that way. So a rank's rows are split into micro-batches of at
most `engine.micro_batch_tokens` padded tokens, their gradients accumulate, and the optimizer
steps once on the whole batch.

Exactness: every aggregation the trainer knows (token, sample, prompt; trainer/algo/losses.py) is
linear in the per-token loss terms, loss = sum_bt W[b, t] * term[b, t], with W set by the WHOLE
batch's denominators (its token count, sample count, per-prompt-group token counts).
trainer/algo/losses.py `token_weights` reads W off the registered aggregation itself (its
gradient with respect to the terms) over the whole kept batch; each micro-batch's loss is then
sum(W * term) over its own rows, times the world size because the engines average gradients
over ranks. Summed over micro-batches and ranks this is exactly the one-big-batch loss,
whatever the split: rows need not keep their prompt group together, and micro-batch
boundaries may cut a group.

Rows are length-bucketed (sorted longest first, cut into runs by an exact dynamic programme: the
fewest micro-batches whose padding stays under PADDING_TARGET) and each micro-batch holds its
rows back to back, right-padded (trainer.models.logprobs.pack_right), so rows of similar length
share a micro-batch and padding stays small; this replaces the shared-prefix forward (one prompt
forward per group) where micro-batching is on, as bucketing scatters a group's samples anyway.
Prompt groups are dealt to ranks longest-first to the lightest rank so that ranks carry about
equal tokens; groups stay whole on a rank (exactness does not need it; without micro-batches the
shared-prefix forward does).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from trainer.algo.losses import token_weights

Lengths = tuple[int, int]  # (prompt tokens, completion tokens) of one row

# Padding a micro-batch plan may leave (the issue asks under 10%). Why 5%: a micro-batch has a
# fixed cost as well as its tokens' (under ZeRO-3: parameter all-gathers for forward,
# recomputation and backward, and a gradient reduce-scatter, which DeepSpeed partly overlaps
# with compute). For an 8B model on H100s a 64k-token micro-batch computes for ~10 s and the
# fixed cost is estimated at 0.1-1 s (not measured: no GPU), so a point of padding (~1% of the
# step's compute, ~0.6 s) costs about what one extra micro-batch does: the target is a
# judgment call, set at half the bound so the bound holds with room. On the
# reasoning mix of benchmarks/bench_packing.py it takes no more micro-batches than greedy
# filling at a 16k budget, 3 more at 32k and 2x as many at 64k (max_padding=0.10: 0 and 2).
PADDING_TARGET = 0.05
_NEVER = np.int64(2**60)  # slots of an impossible split (sums of two stay within int64)


def rows_token_weights(ro, rows: list[int], G: int, aggregation: str,
                       world: int) -> dict[int, torch.Tensor]:
    """world x W (see token_weights) for each kept rollout row, over its completion tokens:
    computed on every rank over the WHOLE kept batch, whichever rows a rank then trains on.
    The factor `world` undoes the engines' average of gradients over ranks."""
    T = max(1, max(len(ro.tokens[r]) for r in rows))
    mask = torch.zeros((len(rows), T), dtype=torch.float64)
    for i, r in enumerate(rows):
        mask[i, : len(ro.loss_mask[r])] = torch.tensor(ro.loss_mask[r], dtype=torch.float64)
    w = token_weights(aggregation, mask, torch.tensor([r // G for r in rows])) * world
    return {r: w[i, : len(ro.tokens[r])] for i, r in enumerate(rows)}


def deal_groups(group_tokens: dict[int, int], world: int) -> list[list[int]]:
    """Prompt groups per rank, about equal tokens each: longest group first, to the rank with
    the fewest tokens so far (LPT scheduling: within 4/3 of the best split). Deterministic, so
    every rank computes the same deal from the same batch."""
    load = [0] * world
    out: list[list[int]] = [[] for _ in range(world)]
    for g in sorted(group_tokens, key=lambda g: (-group_tokens[g], g)):
        r = min(range(world), key=lambda i: (load[i], i))
        out[r].append(g)
        load[r] += group_tokens[g]
    return [sorted(gs) for gs in out]


def padded_tokens(lengths: list[Lengths], contiguous: bool = True) -> int:
    """Token slots one padded micro-batch of these rows occupies. Contiguous (micro-batches,
    trainer.models.logprobs.pack_right): every row right-padded to the longest row. Not (one
    batch, trainer.models.logprobs.pack): every prompt left-padded to the longest prompt and
    every completion right-padded to the longest completion."""
    if not lengths:
        return 0
    if contiguous:
        return len(lengths) * max(p + max(c, 1) for p, c in lengths)
    return len(lengths) * (max(p for p, _ in lengths) + max(max(c, 1) for _, c in lengths))


def plan_micro_batches(lengths: list[Lengths], budget: Optional[int],
                       group: Optional[list[int]] = None,
                       max_padding: float = PADDING_TARGET) -> list[list[int]]:
    """Indices into `lengths`, one list per micro-batch of at most `budget` padded tokens
    (rows x longest row): the fewest micro-batches whose padding is at most `max_padding` of
    their token slots, and among those the least padding (`split_sorted`). Rows are sorted
    longest first (ties: same prompt group together) and micro-batches run in that order, so a
    step that runs out of memory does so in its first forward. A row longer than the budget is
    a micro-batch alone. None: one micro-batch in the given order (no accumulation, the
    trainer's behaviour without micro-batching)."""
    if budget is None or not lengths:
        return [list(range(len(lengths)))] if lengths else []
    grp = group or [0] * len(lengths)
    size = [p + max(c, 1) for p, c in lengths]
    order = sorted(range(len(lengths)), key=lambda i: (-size[i], grp[i], i))
    out: list[list[int]] = []
    start = 0
    for n in split_sorted([size[i] for i in order], budget, max_padding):
        out.append(order[start:start + n])
        start += n
    return out


def split_sorted(desc: list[int], budget: int, max_padding: float) -> list[int]:
    """Sizes of consecutive micro-batches over row lengths sorted longest first: the fewest
    micro-batches whose padded slots (sum of rows x first row) carry at most `max_padding`
    padding, with the fewest slots for that count, each within `budget` unless it is one row.

    Why this shape: for a given count, some optimal split cuts the sorted rows into runs
    (exchange argument: swapping a shorter row of a longer micro-batch with a longer row of a
    shorter one never raises either's longest row or its size), so a dynamic programme over
    cut points is exact. Greedy filling (the earlier plan) is near the best for the count it
    lands on (rank 0 of benchmarks/bench_packing.py at a 64k budget: 15.4% padding in 8
    micro-batches, the best 8 give 13.4%) but cannot trade micro-batches for padding, which is
    what brings it under the target (17 give 4.8%). Layer k holds, for each prefix of the rows,
    the fewest slots that k micro-batches need; layers are added until the whole batch meets
    the padding target (k = one micro-batch per row always does). Banded: a run starting at a
    row of length L holds at most budget // L rows, so each layer costs rows x widest run, not
    rows squared (1,024 rows at a 16k budget: 245 layers in ~0.03 s)."""
    n = len(desc)
    lens = np.asarray(desc, dtype=np.int64)
    width = min(n, max(1, budget // int(lens[-1])))
    runs = np.arange(1, width + 1)[:, None]  # run length s, one row per s
    first = np.arange(n + 1)[None, :] - runs  # its first row when it ends before row j
    ok = first >= 0
    first = np.clip(first, 0, n - 1)
    slots = runs * lens[first]
    cost = np.where(ok & ((runs == 1) | (slots <= budget)), slots, _NEVER)
    best = np.full(n + 1, _NEVER, dtype=np.int64)
    best[0] = 0
    real = int(lens.sum())
    back: list[np.ndarray] = []
    cols = np.arange(n + 1)
    while True:
        total = best[first] + cost
        arg = np.argmin(total, axis=0)
        best = np.minimum(total[arg, cols], _NEVER)
        back.append(arg)
        if len(back) == n or best[n] < _NEVER and real >= (1.0 - max_padding) * best[n]:
            break  # n layers: one row each, no padding (whatever max_padding says)
    sizes: list[int] = []
    end = n
    for arg in reversed(back):
        sizes.append(int(arg[end]) + 1)
        end -= sizes[-1]
    return sizes[::-1]


def padding_share(lengths: list[Lengths], micro: list[list[int]], contiguous: bool = True) -> float:
    """Share of the padded token slots that hold padding, over all micro-batches."""
    slots = sum(padded_tokens([lengths[i] for i in mb], contiguous) for mb in micro)
    real = sum(p + max(c, 1) for p, c in lengths)
    return 1.0 - real / slots if slots else 0.0


@dataclass
class StepTotals:
    """Sums over a rank's micro-batches, reduced over ranks once the step is done."""

    loss: float = 0.0  # this rank's part of the whole-batch loss (world x, see module doc)
    tokens: float = 0.0  # prompt + completion tokens trained on
    slots: float = 0.0  # padded token slots the forwards ran on
    processed: float = 0.0  # token positions the forwards computed (FLOPs count)
    loss_tokens: float = 0.0  # completion tokens the loss counts
    entropy: float = 0.0  # sum over loss tokens
    mismatch: float = 0.0  # sum over loss tokens of |old logp - logp|
    ratio: float = 0.0  # sum over loss tokens of the importance ratio
    clipped: float = 0.0  # loss tokens where the clip was active
    ratio_max: float = field(default=float("-inf"))

    def add(self, loss: float, mask: torch.Tensor, ent: torch.Tensor, mismatch: torch.Tensor,
            ratio: torch.Tensor, clipped: torch.Tensor, tokens: float, slots: float,
            processed: float) -> None:
        """One micro-batch: per-token tensors [B, T] are summed under the loss mask."""
        self.loss += loss
        self.tokens += tokens
        self.slots += slots
        self.processed += processed
        self.loss_tokens += float(mask.sum())
        self.entropy += float((ent * mask).sum())
        self.mismatch += float((mismatch * mask).sum())
        self.ratio += float((ratio * mask).sum())
        self.clipped += float((clipped * mask).sum())
        if mask.any():
            self.ratio_max = max(self.ratio_max, float(ratio[mask.bool()].max()))
