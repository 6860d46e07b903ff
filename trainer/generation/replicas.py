"""Data-parallel vLLM replicas: one generation service made of several engines.

Why: a node's generation GPUs are best used as several engines (each tensor_parallel_size GPUs)
rather than one engine tensor-parallel over all of them when the model fits in fewer GPUs:
tensor parallelism all-reduces every layer, replicas share nothing while decoding. The
replicas together implement the Generator protocol (trainer/generation/rollout.py), so the loop, the
pipeline source and eval (trainer/generation/eval_service.py) see one generator.

How:
- Each replica is a VLLMGenerator whose engine runs in its own process, started with its own
  GPUs (CUDA_VISIBLE_DEVICES: its tensor-parallel group, from this process's binding,
  trainer/dist/binding.py). Every node's local rank 0 is bound to its node's engines, and this
  factory starts them on whichever host calls it: every node's local rank 0 (trainer/generation/
  feeders.py: each makes its node's share of a step in pipeline mode, of a big generation in
  ppo_off_policy, trainer/generation/offpolicy.py). As vLLM's own
  offline data parallelism does, each engine is one LLM in its own process group (vLLM 0.32
  refuses LLM(data_parallel_size>1) in one process: vllm/entrypoints/llm.py LLM.__init__,
  pointing to examples/features/data_parallel/data_parallel_offline.py).
- The stream (trainer/generation/stream.py: the pipeline's rollouts and every eval) drives
  every replica, each sample dealt to the replica with the most free KV room and never beyond
  it (trainer/generation/dealing.py). A generate() call (ppo_off_policy's big generation)
  deals its prompts (each with its n samples) by tokens: longest prompt first to the replica
  with the least outstanding work (tokens dealt and not yet returned, over every caller), so
  equal prompts go round-robin. The parts run at once (one thread per replica: each mostly
  waits on its engine process) and are merged back in the order asked. Every prompt keeps its
  own seed (seed + i*n, as one engine gives it), so the samples do not depend on the dealing.
- An eval pins some replicas at its step's weights (trainer/generation/pins.py): rollouts and
  pushes leave them until it ends.
- A weight push walks the trainer's parameters once (under ZeRO-3: one gather per parameter,
  which the other ranks join once) and broadcasts each over the update group of every replica
  not pinned by an eval (trainer/generation/push.py push_to_all), each paused at its next step
  boundary (VLLMGenerator.paused: the new weights labelled before any step runs on them).
"""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Sequence

import torch

from trainer.config import TrainConfig
from trainer.dist.binding import current_binding
from trainer.rollouts import Generation
from trainer.generation.vllm_engine import VLLMGenerator
from trainer.generation.push import PushStop, named_weights, push_to_all, weight_specs
from trainer.generation.pins import Pins


def replica_placements(config: TrainConfig, replicas: int) -> list[dict[str, str]]:
    """Process environment of each of this process's engines (its binding's engine_env: on
    GPUs the engine's own devices through CUDA_VISIBLE_DEVICES, as the launcher named them);
    always an engine process of its own."""
    own_process = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
    b = current_binding(config)
    return [{**own_process, **b.engine_env(i)} for i in range(replicas)]


def deal(lengths: Sequence[int], loads: Sequence[int],
         eligible: Optional[Sequence[int]] = None) -> list[list[int]]:
    """Prompt indices for each replica (ascending): longest prompt first, each to the replica
    with the least load (`loads`: work already outstanding there, in tokens; ties: lowest
    index) among the `eligible` ones (None or none: all). Equal prompts on idle replicas go
    round-robin."""
    load = list(loads)
    parts: list[list[int]] = [[] for _ in load]
    among = list(eligible) if eligible else list(range(len(load)))
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = min(among, key=lambda r: (load[r], r))
        parts[r].append(i)
        load[r] += max(1, lengths[i])
    return [sorted(p) for p in parts]


def merge(parts: Sequence[Generation], dealt: Sequence[Sequence[int]], n: int) -> Generation:
    """The replicas' outputs back in the order asked: prompt i's n rows at i*n .. i*n+n-1."""
    total = sum(len(d) for d in dealt)
    rows: list = [None] * (total * n)
    for gen, idx in zip(parts, dealt):
        for k, i in enumerate(idx):
            for j in range(n):
                r = k * n + j
                rows[i * n + j] = (gen.tokens[r], gen.logprobs[r], gen.versions[r], gen.finished[r])
    return Generation(tokens=[r[0] for r in rows], logprobs=[r[1] for r in rows],
                      versions=[r[2] for r in rows], finished=[r[3] for r in rows])


class ReplicaGenerator:
    """Generator protocol over several VLLMGenerator engines (data-parallel replicas)."""

    def __init__(self, config: TrainConfig, model: torch.nn.Module, tokenizer,
                 replicas: int) -> None:
        self._setup(config, [VLLMGenerator(config, model, tokenizer, placement=env, push=False)
                             for env in replica_placements(config, replicas)])
        self.sync_weights(model, version=0)

    @classmethod
    def over(cls, config: TrainConfig, engines: list[VLLMGenerator]) -> "ReplicaGenerator":
        """A set over engines already started, without the trainer's module (the engine host,
        trainer/generation/host.py, whose trainer pushes the first weights itself)."""
        self = cls.__new__(cls)
        self._setup(config, engines)
        return self

    def _setup(self, config: TrainConfig, engines: list[VLLMGenerator]) -> None:
        self.dtype = torch.float32 if config.precision.dtype == "fp32" else torch.bfloat16
        self.engines = engines
        self.head_dtype = self.engines[0].head_dtype
        self._loads = [0] * len(self.engines)  # outstanding prompt tokens x samples per replica
        self._lock = threading.Lock()
        # A worker per replica per concurrent caller (the rollout thread, eval, a spare): with
        # one per replica, eval's parts queued behind a whole rollout call instead of joining
        # the engines at their next step (workers mostly wait on their engine process).
        self._pool = ThreadPoolExecutor(4 * len(self.engines), thread_name_prefix="ablate-replica")
        self.pins = Pins(len(self.engines))  # engines an eval holds (trainer/generation/pins.py)
        self.last_deal: list[list[int]] = []  # the latest call's dealing (run log, tests)

    def generate(self, prompts: list[list[int]], *, n: int, max_new_tokens: int,
                 temperature: float, top_p: float, seed: Optional[int]) -> Generation:
        seeds = None if seed is None else [seed + i * n for i in range(len(prompts))]
        with self._lock:  # to the engines that take rollouts now (not an eval's: pins.py)
            dealt = deal([len(p) * n for p in prompts], self._loads,
                         self.pins.rollout_engines())
            work = [sum(len(prompts[i]) * n for i in idx) for idx in dealt]
            self._loads = [a + b for a, b in zip(self._loads, work)]
            self.last_deal = dealt
        try:
            futures = [self._pool.submit(e.generate_seeded, [prompts[i] for i in idx],
                                         None if seeds is None else [seeds[i] for i in idx],
                                         n=n, max_new_tokens=max_new_tokens,
                                         temperature=temperature, top_p=top_p) if idx else None
                       for e, idx in zip(self.engines, dealt)]
            parts = [f.result() if f is not None else Generation([], [], [], [])
                     for f in futures]
        finally:
            with self._lock:
                self._loads = [a - b for a, b in zip(self._loads, work)]
        return merge(parts, dealt, n)

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        """Pause every replica at its next step boundary, stream the weights once into all of
        them, resume (in flight, as one engine does). A stop signal may cut it (every replica
        then `torn`, as one engine, trainer/generation/vllm_engine.py _load)."""
        # an eval's engines keep its step's weights; no eval pins the targets until it ends
        targets = self.pins.begin_push(force=True)
        engines = [self.engines[i] for i in targets]
        held, done = [], None
        try:
            with contextlib.ExitStack() as paused:
                for e in engines:
                    e._take_engine()
                    held.append(e)
                    paused.enter_context(e.paused())
                stop = PushStop(model)
                push_to_all([e.broadcaster(model) for e in engines],
                            weight_specs(model, self.dtype), named_weights(model, self.dtype, stop))
                for e in engines:
                    e.torn = stop.cut
                    if not stop.cut:
                        e.loaded(version)
            if not stop.cut:
                done = version
        finally:
            self.pins.end_push(targets, done)
            for e in held:
                e._gen_lock.release()

    @property
    def version(self) -> int:
        """The oldest weights an engine that takes pushes holds: below the trainer's version,
        a push is due (trainer/generation/eval_service.py bring_up_to_date)."""
        return min(self.pins.versions[i] for i in self.pins.push_targets())

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for e in self.engines:
            e.close()
