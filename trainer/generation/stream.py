"""vLLM engines as a continuous stream behind the generation service (trainer/generation/
service.py `StreamService`): one engine, or every engine of a replica set.

Why: one synchronous generate call per batch (`CallService`, the pipeline's producer) drains
the engines at the end of every batch (the longest sample keeps them half empty); under forced
interruption the answer pass waits for the whole batch's thinking pass, which decodes every
sample to the largest budget; and a replica set called that way was sent more sequences than
its KV cache holds, so vLLM preempted and recomputed them. Here each sample is a request:
- it is dealt to the engine (of those it may use: trainer/generation/pins.py) with the most
  free KV room that can hold its whole footprint, and waits while none can
  (trainer/generation/dealing.py): no engine is sent more than it holds, so vLLM never
  preempts, and an engine with room never idles while samples wait;
- once dealt it is added at that engine's next step (vLLM's continuous batching admits it
  beside whatever else runs: rollouts, eval);
- under `length.control: interrupt` its thinking pass runs with its own drawn budget as
  `max_tokens` (the same draws, in the same order, as trainer/algo/length.py `interrupt`), so no
  token past the budget is decoded, and its answer pass is added on the same engine the moment
  its thinking ends, with its own allowance (its thinking's KV is in that engine's prefix
  cache, and its reservation shrinks to what it can still reach);
- each token carries the version of the weights that sampled it, as the engine stamped it
  (trainer/generation/vllm_outputs.py sampled_versions);
- a request's result is ready when its last sample is.
The pipeline admits prompt groups under PipelineRL's k bound before it submits them
(trainer/generation/offpolicy.py GroupStream), so a group waiting here for room is decoded with
weights no older than it was admitted with: the bound still holds.

How, following vLLM 0.32's own engine loop (vllm/entrypoints/llm.py `LLM._run_engine`:
`llm_engine.add_request` then `llm_engine.step()` while `has_unfinished_requests()`): each
engine belongs to a VLLMGenerator (trainer/generation/vllm_engine.py), which every caller
shares through its engine lock and its request routes; each sample registers a route, so
whichever thread steps that engine (this service's driver for it, a rollout call, an eval
call) hands its tokens to it, and a finishing pass adds the next pass right there (the
stepping thread holds the engine). One driver thread per engine steps it while this service
has samples there. Samples are n=1 requests on seed + i*n + j: vLLM gives a request's j-th
parallel-sampling child seed + j (vllm/v1/engine/parallel_sampling.py
`ParentRequest.get_child_info`), so a prompt's samples draw what one n-sample request would,
on whichever engine they run.
"""

from __future__ import annotations

import queue
import random
import threading
from collections import deque
from typing import Iterator, Optional

from trainer.dist import preempt
from trainer.config import TrainConfig
from trainer.generation.requests import Request, Result, Weights, finished, version_range
from trainer.algo.length import closed_at, marker_ids, overlong
from trainer.generation.dealing import footprint, pick
from trainer.rollouts import Rollout
from trainer.generation.vllm_outputs import sampled_versions


def stream_service(gen, config: TrainConfig, tokenizer) -> Optional["StreamService"]:
    """A StreamService over a vLLM generator: one engine (VLLMGenerator) or data-parallel
    replicas (trainer/generation/replicas.py ReplicaGenerator), or one in the engine host
    (trainer/generation/host.py); None for anything else (hf)."""
    from trainer.generation.replicas import ReplicaGenerator
    from trainer.generation.vllm_engine import VLLMGenerator

    if callable(hosted := getattr(gen, "stream", None)):  # in the engine host (host.py)
        return hosted()
    return (StreamService(gen, config, tokenizer)
            if isinstance(gen, (VLLMGenerator, ReplicaGenerator)) else None)


_SHARED_LOCK = threading.Lock()


def shared_cond(gen) -> threading.Condition:
    """The lock of every stream over `gen`'s engines (rollouts' and eval's): it guards the
    engines' rooms and wakes the streams when room frees. Lock order: an engine, this, the
    generator's pins; never an engine while holding this."""
    with _SHARED_LOCK:
        if getattr(gen, "_stream_cond", None) is None:
            gen._stream_cond = threading.Condition()
        return gen._stream_cond


class _Sample:
    """One sample's passes: its route in the engine (`n` = 1, `add` as _Call's), the engine it
    was dealt to and the KV blocks it reserved there."""

    n = 1

    def __init__(self, job: "_Job", row: int, prompt: list[int], budget: Optional[int],
                 first: int, foot: int) -> None:
        self.job, self.row, self.prompt, self.budget = job, row, prompt, budget
        self.first = first  # max_tokens of its first pass (thinking budget or max_new_tokens)
        self.foot = foot  # tokens it can reach (dealing.footprint): what it reserves
        self.engine: Optional[int] = None  # dealt to (index in the generator's engines)
        self.blocks = 0  # KV blocks reserved there
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.mask: list[int] = []
        self.finished = False
        self.interrupted = False
        self.gen_tokens = len(prompt)
        self.answer_left: Optional[int] = None  # tokens the answer pass may add (None: thinking)
        self.salt: Optional[str] = None  # its first pass's prefix-cache salt (_add)
        self._answered = 0
        self.pass_start = 0  # where the running pass's tokens start in `tokens`
        self.rid: Optional[str] = None

    def add(self, _row: int, ids: list[int], logprobs, version: int, reason,
            spans=None) -> None:
        """Tokens of the running pass (called by whichever thread steps the engine)."""
        if self.answer_left is not None:
            ids = ids[:max(0, self.answer_left - self._answered)]
        self.tokens += ids
        self.logprobs += [step[t].logprob for t, step in zip(ids, logprobs or ())]
        self.versions += [version] * len(ids)
        self.mask += [1] * len(ids)
        self.gen_tokens += len(ids)
        if self.answer_left is not None:
            self._answered += len(ids)
        if reason is not None:  # the pass's tokens as the engine stamped them when sampled
            a = self.pass_start
            self.versions[a:] = sampled_versions(spans, self.versions[a:])
            self.job.service._pass_done(self, reason == "stop")


class _Job:
    def __init__(self, service: "StreamService", request: Request, rows: int) -> None:
        self.service, self.request = service, request
        self.samples: list[_Sample] = []
        self.open = rows
        self.failed = False


class StreamService:
    """Every sample its own engine request, dealt to the engine with the most free room and
    never beyond it; answer passes added as thinking ends (see the module doc). Implements
    trainer/generation/service.py's GenerationService."""

    def __init__(self, gen, config: TrainConfig, tokenizer) -> None:
        self.gen, self.config, self.tok = gen, config, tokenizer
        self.engines = gen.engines
        L = config.length
        self.marker = marker_ids(tokenizer, L.think_end) if L.control == "interrupt" else None
        self.text = (tokenizer(L.interrupt_text, add_special_tokens=False).input_ids
                     if L.control == "interrupt" else [])
        self.done: "queue.Queue[Result]" = queue.Queue()
        self.cond = shared_cond(gen)
        self.backlog: deque[_Sample] = deque()  # submitted, waiting for room
        self.inbox: list[list[_Sample]] = [[] for _ in self.engines]  # dealt, not added yet
        self.live: list[dict[str, _Sample]] = [{} for _ in self.engines]  # request id -> sample
        self.stopping = False
        self.closed = False
        self.threads: list[threading.Thread] = []
        self.early_answers = 0  # answer passes added while another sample was still thinking
        self.dealt = [0] * len(self.engines)  # samples dealt to each engine (run log, tests)
        self.peak = [0] * len(self.engines)  # most samples running at once on each engine

    # -- the interface ---------------------------------------------------------------------
    def start(self) -> None:
        if not self.threads:
            self.threads = [threading.Thread(target=self._drive, args=(i,), daemon=True,
                                             name=f"ablate-stream-{i}")
                            for i in range(len(self.engines))]
            for t in self.threads:
                t.start()

    def push_weights(self, weights: Weights, version: int) -> None:
        """In flight (PipelineRL): every engine that takes pushes is taken at its driver's
        next step boundary, loaded, and every later token there carries `version`."""
        if isinstance(weights, dict):
            raise TypeError("the vLLM engine takes pushes from the trainer's module")
        self.gen.sync_weights(weights, version)

    def submit(self, request: Request) -> None:
        """Queue every sample of `request` for the engines; each starts (its first pass) as
        soon as an engine it may use has room for its whole footprint."""
        c, L = self.config, self.config.length
        rows = [p for p in request.prompts for _ in range(request.n)]
        job = _Job(self, request, len(rows))
        budgets: list[Optional[int]] = [None] * len(rows)
        if L.control == "interrupt":  # trainer/algo/length.py interrupt's draws, in its order
            think = min(L.thinking_budget, c.rollout.max_new_tokens)
            lo = max(1, int(L.budget_min_fraction * think))
            rng = random.Random(request.seed)
            budgets = [rng.randint(lo, think) for _ in rows]
        for r, (p, b) in enumerate(zip(rows, budgets)):
            first = b or c.rollout.max_new_tokens
            foot = (footprint(len(p), b, L.answer_budget, len(self.text)) if b is not None
                    else footprint(len(p), first))
            job.samples.append(_Sample(job, r, list(p), b, first, foot))
        with self.cond:
            self.backlog.extend(job.samples)
        self._deal()

    def results(self, timeout: Optional[float] = None) -> Iterator[Result]:
        return finished(self.done, timeout)

    def stop(self, timeout_s: float = 60.0) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        for t in self.threads:
            t.join(timeout=timeout_s)
        self._abort(preempt.Stopped("service stopped"))

    # -- dealing ---------------------------------------------------------------------------
    def _eligible(self, s: _Sample) -> list[int]:
        """Engines `s` may go to: its eval's pinned ones, or those taking rollouts (pins.py)."""
        pin = s.job.request.pin
        return list(pin.engines) if pin is not None else self.gen.pins.rollout_engines()

    def _deal(self) -> None:
        """Waiting samples, in order, to the engine with the most free room that can hold
        each (dealing.py pick); the first that fits nowhere waits, and those behind it."""
        rooms = [e.room for e in self.engines]
        dealt = False
        with self.cond:
            while self.backlog and not self.stopping:
                s = self.backlog[0]
                i = pick(rooms, s.foot, self._eligible(s))
                if i is None:
                    break
                self.backlog.popleft()
                s.engine, s.blocks = i, rooms[i].take(s.foot)
                self.dealt[i] += 1
                self.peak[i] = max(self.peak[i], rooms[i].running)
                self.inbox[i].append(s)
                dealt = True
            if dealt:
                self.cond.notify_all()

    def _release(self, s: _Sample, blocks: Optional[int] = None) -> None:
        """Give back `s`'s reservation (all of it; `blocks`: that many, it keeps running)."""
        with self.cond:
            if s.engine is None:
                return
            room = self.engines[s.engine].room
            if blocks is None:
                room.give(s.blocks)
                s.engine, s.blocks = None, 0
            else:
                room.give(blocks, finished=False)
                s.blocks -= blocks
            self.cond.notify_all()

    # -- the stream ------------------------------------------------------------------------
    def _add(self, s: _Sample, prompt: list[int], max_tokens: int, seed: int) -> None:
        """One pass of sample `s` into its engine (caller holds that engine)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from trainer.generation.vllm_engine import GREEDY_BELOW

        r, T = self.config.rollout, s.job.request.temperature
        e = self.engines[s.engine]
        params = SamplingParams(
            n=1, max_tokens=max(1, max_tokens), temperature=T, top_p=r.top_p,
            # greedy: no seed, as VLLMGenerator.generate_seeded sends it (a seeded request
            # takes vLLM's random-sampling path, whose argmax can break near-ties otherwise)
            seed=None if T < GREEDY_BELOW else seed, logprobs=0, detokenize=False,
            stop_token_ids=[e.eos] if e.eos is not None else None,
            output_kind=RequestOutputKind.DELTA)
        s.pass_start = len(s.tokens)
        if s.answer_left is None:  # a first pass: salted with the weights' version; an answer
            s.salt = e.cache_salt()  # pass keeps it, to reuse its thinking's KV (vllm_engine.py)
        s.rid = e.add_routed(s, prompt, params, salt=s.salt)
        self.live[s.engine][s.rid] = s

    def _admit(self, i: int) -> None:
        """Start the first pass of every sample dealt to engine i (caller holds it)."""
        with self.cond:
            todo, self.inbox[i] = self.inbox[i], []
        for s in todo:
            self._add(s, s.prompt, s.first, s.job.request.seed + s.row)

    def _pass_done(self, s: _Sample, stopped: bool) -> None:
        """A pass of `s` ended (the stepping thread holds its engine): its next pass goes in
        now, or the sample is complete."""
        self.live[s.engine].pop(s.rid, None)
        self.engines[s.engine].drop_route(s.rid)
        L = self.config.length
        if s.answer_left is not None:  # the answer pass ended
            s.finished = stopped and s._answered <= s.answer_left
            return self._complete(s)
        s.finished = stopped
        if L.control != "interrupt":
            return self._complete(s)
        end = closed_at(s.tokens, self.marker, s.budget)
        if end is None:
            if stopped and len(s.tokens) <= s.budget:
                return self._complete(s)  # answered without thinking
            s.interrupted, s.finished = True, False  # cut at its budget: interrupt it
            return self._answer(s, self.text, L.answer_budget)
        limit = end + L.answer_budget
        if len(s.tokens) > limit:
            self._cut(s, limit)
            return self._complete(s)
        if not stopped and len(s.tokens) < limit:  # its budget ended the pass, not its answer
            return self._answer(s, [], limit - len(s.tokens))
        return self._complete(s)

    def _answer(self, s: _Sample, text: list[int], allowance: int) -> None:
        """The answer pass, on the same engine (its thinking's KV is in the prefix cache
        there), its reservation shrunk to what it can still reach."""
        cont = s.prompt + s.tokens + text
        ver = s.versions[-1] if s.versions else self.engines[s.engine].version
        s.tokens += text
        s.logprobs += [0.0] * len(text)
        s.versions += [ver] * len(text)
        s.mask += [0] * len(text)
        s.gen_tokens += len(cont)  # the re-prefill (decoded tokens count as they come)
        s.answer_left, s._answered = allowance, 0
        spare = s.blocks - self.engines[s.engine].room.need(len(cont) + allowance)
        if spare > 0:
            self._release(s, spare)
        if any(o.answer_left is None for live in self.live for o in live.values()):
            self.early_answers += 1
        seed = s.job.request.seed + len(s.job.samples) + s.row  # not another sample's stream
        self._add(s, cont, allowance, seed)

    @staticmethod
    def _cut(s: _Sample, length: int) -> None:
        s.tokens, s.logprobs = s.tokens[:length], s.logprobs[:length]
        s.versions, s.mask = s.versions[:length], s.mask[:length]
        s.finished = False

    def _complete(self, s: _Sample) -> None:
        self._release(s)
        job = s.job
        job.open -= 1
        if job.open == 0 and not job.failed:
            ro = self._rollout(job)
            self.done.put(Result(job.request.tag, ro, versions=version_range(ro)))

    def _rollout(self, job: _Job) -> Rollout:
        L, ss = self.config.length, job.samples
        pen = [0.0] * len(ss)
        if L.control == "overlong_penalty":
            pen = [overlong(len(s.tokens), L.overlong_max, L.overlong_cache) for s in ss]
        return Rollout(prompts=[s.prompt for s in ss], tokens=[s.tokens for s in ss],
                       logprobs=[s.logprobs for s in ss], versions=[s.versions for s in ss],
                       loss_mask=[s.mask for s in ss], finished=[s.finished for s in ss],
                       interrupted=[s.interrupted for s in ss], penalty=pen,
                       gen_tokens=[s.gen_tokens for s in ss])

    def _drive(self, i: int) -> None:
        """Step engine i while this service has samples running or dealt there (other
        callers' requests step along; a caller waiting for the engine gets it between
        steps), dealing waiting samples as room frees. A stop signal (or an engine's error)
        aborts this service's samples and ends their requests with it."""
        e = self.engines[i]
        while True:
            with self.cond:
                self.cond.wait_for(lambda: self.live[i] or self.inbox[i] or self.stopping,
                                   timeout=0.2)
                if self.stopping:
                    return
                busy = bool(self.live[i] or self.inbox[i])
            if not busy:
                self._deal()  # room another stream freed (eval's, or a finished call's)
                continue
            try:
                with e.engine_held() as engine:
                    while not self.stopping:
                        preempt.check()
                        self._admit(i)
                        if not self.live[i]:
                            break
                        e.step_routed(engine)
                        e.yield_engine()
                        if self.backlog:
                            self._deal()
            except BaseException as err:  # noqa: BLE001 - every open request gets the error
                self._abort(err)
                return

    def _abort(self, error: BaseException) -> None:
        """End every open request of this service with `error` (once): its running passes
        aborted in their engines, the waiting and dealt ones dropped, the room given back."""
        with self.cond:
            if self.closed:
                return
            self.closed = self.stopping = True
            waiting = list(self.backlog) + [s for box in self.inbox for s in box]
            self.backlog.clear()
            self.inbox = [[] for _ in self.engines]
            self.cond.notify_all()
        running = []
        for i, e in enumerate(self.engines):
            with e.engine_held() as engine:
                rids = list(self.live[i])
                if rids:
                    engine.abort_request(rids)
                for rid in rids:
                    e.drop_route(rid)
                running += self.live[i].values()
                self.live[i] = {}
        jobs = {}
        for s in waiting + running:
            self._release(s)
            jobs[id(s.job)] = s.job
        for job in jobs.values():
            if job.open and not job.failed:
                job.failed = True
                self.done.put(Result(job.request.tag, error=error))
