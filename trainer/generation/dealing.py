"""Which engine of a replica set a sample goes to: the one with the most free KV room, never
more than an engine can hold at once.

Why: vLLM admits whatever it is sent and, when its KV cache runs out as sequences grow,
preempts running sequences and later recomputes them (vllm/v1/core/sched/scheduler.py:841
`schedule` preempts; :1571-1593 `_preempt_request` sets num_computed_tokens to 0: recompute).
At the paper's scale a replica's KV cache holds 24 full-length (16k-token) sequences, and a
blocking call sent each replica 96: most of them waited, and those admitted were preempted as
they grew. The stream
(trainer/generation/stream.py) instead reserves each sample's whole footprint (the tokens it
can reach: its prompt, its drawn thinking budget, the interruption text and the answer
allowance) in KV blocks on one engine when it is dealt, and deals the next sample only where
that reservation fits: no engine is sent more than its cache holds, so vLLM never preempts,
and an engine with free room never idles while samples wait. Dealing to the engine with the
most free room balances the outstanding tokens across the set.

How the room is read: an engine's KV cache is `cache_config.num_gpu_blocks` blocks of
`cache_config.block_size` tokens (set in the client's config after the engine core sized it:
vllm/v1/engine/core_client.py:852-860 for an engine process, vllm/v1/engine/core.py:340 in
process), and its scheduler runs at most `scheduler_config.max_num_seqs` sequences at once
(vllm/config/scheduler.py:62). A sequence holds ceil(tokens / block_size) blocks
(PagedAttention). The footprint counts a prompt once per sample although vLLM's prefix cache
shares full prompt blocks among a prompt's samples: the room left over is slack, never an
overcommit.

Pure Python (no torch, no vLLM): the dealing is tested with hand-computed cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence


@dataclass
class Room:
    """One engine's capacity and what the samples dealt to it have reserved."""

    blocks: int  # KV cache blocks (cache_config.num_gpu_blocks)
    block_size: int  # tokens per block (cache_config.block_size)
    max_seqs: int  # sequences the scheduler runs at once (scheduler_config.max_num_seqs)
    reserved: int = 0  # blocks reserved by samples dealt here and not finished
    running: int = 0  # samples dealt here and not finished

    def need(self, tokens: int) -> int:
        """Blocks a sequence of `tokens` tokens holds."""
        return max(1, math.ceil(tokens / self.block_size))

    def free(self) -> int:
        return self.blocks - self.reserved

    def fits(self, tokens: int) -> bool:
        """Can a sample of this footprint start now? An empty engine takes any one sample
        (vLLM checked at start that its cache holds one max_model_len sequence)."""
        if self.running >= self.max_seqs:
            return False
        return self.running == 0 or self.need(tokens) <= self.free()

    def take(self, tokens: int) -> int:
        """Reserve a sample's footprint; returns the blocks reserved (give them back)."""
        blocks = self.need(tokens)
        self.reserved += blocks
        self.running += 1
        return blocks

    def give(self, blocks: int, finished: bool = True) -> None:
        """Hand back `blocks`; `finished`: the sample is done (else it only shrank)."""
        self.reserved -= blocks
        if finished:
            self.running -= 1


def pick(rooms: Sequence[Room], tokens: int, eligible: Iterable[int]) -> Optional[int]:
    """The eligible engine with the most free blocks that can take a sample of `tokens` now
    (ties: the lowest index); None when none can (the sample waits for room)."""
    best: Optional[int] = None
    for i in sorted(eligible):
        r = rooms[i]
        if r.fits(tokens) and (best is None or r.free() > rooms[best].free()):
            best = i
    return best


def footprint(prompt: int, thinking: int, answer: int = 0, text: int = 0) -> int:
    """Tokens a sample can reach: its prompt, its first pass's max_tokens (`thinking`: the
    drawn thinking budget under forced interruption, else max_new_tokens) and, under forced
    interruption, the interruption text and the answer allowance of its answer pass
    (trainer/algo/length.py: an answer pass continues prompt + thinking + text by at most
    answer_budget tokens)."""
    return prompt + thinking + text + answer
