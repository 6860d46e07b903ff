"""A vLLM engine as a continuous stream behind the generation service (trainer/generation/
service.py `StreamService`).

Why: one synchronous generate call per batch (what `CallService` and the pipeline's producer
do) drains the engine at the end of every batch: the batch's longest sample keeps the engine
half empty, and under forced interruption the answer pass waits for the whole batch's
thinking pass, which itself decodes every sample to the largest budget and cuts afterwards.
Here every sample is its own engine request:
- it is added as soon as its request is submitted (the engine's continuous batching admits it
  at its next step, beside whatever else runs: rollouts, eval);
- under `length.control: interrupt` its thinking pass runs with its own drawn budget as
  `max_tokens` (the same draws, in the same order, as trainer/algo/length.py `interrupt`), so no
  token past the budget is decoded, and its answer pass is added the moment its thinking
  ends, with its own allowance;
- a request's result is ready when its last sample is.

How, following vLLM 0.32's own engine loop (vllm/entrypoints/llm.py `LLM._run_engine`:
`llm_engine.add_request` then `llm_engine.step()` while `has_unfinished_requests()`): the
engine belongs to the VLLMGenerator (trainer/generation/vllm_engine.py), which every caller
shares through its engine lock and its request routes; each sample registers a route, so
whichever thread steps the engine (this service's driver, a rollout call, an eval call)
hands its tokens to it, and a finishing pass adds the next pass right there (the stepping
thread holds the engine). Samples are n=1 requests on seed + i*n + j: vLLM gives a request's
j-th parallel-sampling child seed + j (vllm/v1/engine/parallel_sampling.py
`ParentRequest.get_child_info`), so a prompt's samples draw what one n-sample request would.
"""

from __future__ import annotations

import queue
import random
import threading
from typing import Iterator, Optional

from trainer.dist import preempt
from trainer.config import TrainConfig
from trainer.generation.requests import Request, Result, Weights, finished, version_range
from trainer.algo.length import closed_at, marker_ids, overlong
from trainer.generation.rollout import Rollout


def stream_service(gen, config: TrainConfig, tokenizer) -> Optional["StreamService"]:
    """A StreamService over a single VLLMGenerator; None for anything else (hf, replicas)."""
    from trainer.generation.vllm_engine import VLLMGenerator

    return StreamService(gen, config, tokenizer) if isinstance(gen, VLLMGenerator) else None


class _Sample:
    """One sample's passes: its route in the engine (`n` = 1, `add` as _Call's)."""

    n = 1

    def __init__(self, job: "_Job", row: int, prompt: list[int], budget: Optional[int]) -> None:
        self.job, self.row, self.prompt, self.budget = job, row, prompt, budget
        self.tokens: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.mask: list[int] = []
        self.finished = False
        self.interrupted = False
        self.gen_tokens = len(prompt)
        self.answer_left: Optional[int] = None  # tokens the answer pass may add (None: thinking)
        self.rid: Optional[str] = None

    def add(self, _row: int, ids: list[int], logprobs, version: int, reason) -> None:
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
        if reason is not None:
            self.job.service._pass_done(self, reason == "stop")


class _Job:
    def __init__(self, service: "StreamService", request: Request, rows: int) -> None:
        self.service, self.request = service, request
        self.samples: list[_Sample] = []
        self.open = rows


class StreamService:
    """Every sample its own engine request; answer passes added as thinking ends (see the
    module doc). Implements trainer/generation/service.py's GenerationService."""

    def __init__(self, gen, config: TrainConfig, tokenizer) -> None:
        self.gen, self.config, self.tok = gen, config, tokenizer
        L = config.length
        self.marker = marker_ids(tokenizer, L.think_end) if L.control == "interrupt" else None
        self.text = (tokenizer(L.interrupt_text, add_special_tokens=False).input_ids
                     if L.control == "interrupt" else [])
        self.done: "queue.Queue[Result]" = queue.Queue()
        self.live: dict[str, _Sample] = {}  # request id -> sample (this service's)
        self.wake = threading.Condition()
        self.stopping = False
        self.thread: Optional[threading.Thread] = None
        self.early_answers = 0  # answer passes added while another sample was still thinking

    # -- the interface ---------------------------------------------------------------------
    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._drive, name="ablate-stream",
                                           daemon=True)
            self.thread.start()

    def push_weights(self, weights: Weights, version: int) -> None:
        """In flight (PipelineRL): the engine is taken at the driver's next step boundary,
        loaded, and every later token of every running sample carries `version`."""
        if isinstance(weights, dict):
            raise TypeError("the vLLM engine takes pushes from the trainer's module")
        self.gen.sync_weights(weights, version)

    def submit(self, request: Request) -> None:
        """Add every sample of `request` to the engine now (its first pass)."""
        c, L = self.config, self.config.length
        rows = [p for p in request.prompts for _ in range(request.n)]
        job = _Job(self, request, len(rows))
        budgets: list[Optional[int]] = [None] * len(rows)
        if L.control == "interrupt":  # trainer/algo/length.py interrupt's draws, in its order
            think = min(L.thinking_budget, c.rollout.max_new_tokens)
            lo = max(1, int(L.budget_min_fraction * think))
            rng = random.Random(request.seed)
            budgets = [rng.randint(lo, think) for _ in rows]
        with self.gen.engine_held():
            for r, (p, b) in enumerate(zip(rows, budgets)):
                s = _Sample(job, r, list(p), b)
                job.samples.append(s)
                self._add(s, list(p), b or c.rollout.max_new_tokens, request.seed + r)
        with self.wake:
            self.wake.notify_all()

    def results(self, timeout: Optional[float] = None) -> Iterator[Result]:
        return finished(self.done, timeout)

    def stop(self, timeout_s: float = 60.0) -> None:
        with self.wake:
            self.stopping = True
            self.wake.notify_all()
        if self.thread is not None:
            self.thread.join(timeout=timeout_s)

    # -- the stream ------------------------------------------------------------------------
    def _add(self, s: _Sample, prompt: list[int], max_tokens: int, seed: int) -> None:
        """One pass of sample `s` into the engine (caller holds the engine)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        from trainer.generation.vllm_engine import GREEDY_BELOW

        r, T = self.config.rollout, s.job.request.temperature
        params = SamplingParams(
            n=1, max_tokens=max(1, max_tokens), temperature=T, top_p=r.top_p,
            # greedy: no seed, as VLLMGenerator.generate_seeded sends it (a seeded request
            # takes vLLM's random-sampling path, whose argmax can break near-ties otherwise)
            seed=None if T < GREEDY_BELOW else seed, logprobs=0, detokenize=False,
            stop_token_ids=[self.gen.eos] if self.gen.eos is not None else None,
            output_kind=RequestOutputKind.DELTA)
        s.rid = self.gen.add_routed(s, prompt, params)
        self.live[s.rid] = s

    def _pass_done(self, s: _Sample, stopped: bool) -> None:
        """A pass of `s` ended (the stepping thread holds the engine): its next pass goes in
        now, or the sample is complete."""
        self.live.pop(s.rid, None)
        self.gen.drop_route(s.rid)
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
        cont = s.prompt + s.tokens + text
        ver = s.versions[-1] if s.versions else self.gen.version
        s.tokens += text
        s.logprobs += [0.0] * len(text)
        s.versions += [ver] * len(text)
        s.mask += [0] * len(text)
        s.gen_tokens += len(cont)  # the re-prefill (decoded tokens count as they come)
        s.answer_left, s._answered = allowance, 0
        if any(o.answer_left is None for o in self.live.values()):
            self.early_answers += 1
        seed = s.job.request.seed + len(s.job.samples) + s.row  # not another sample's stream
        self._add(s, cont, allowance, seed)

    @staticmethod
    def _cut(s: _Sample, length: int) -> None:
        s.tokens, s.logprobs = s.tokens[:length], s.logprobs[:length]
        s.versions, s.mask = s.versions[:length], s.mask[:length]
        s.finished = False

    def _complete(self, s: _Sample) -> None:
        job = s.job
        job.open -= 1
        if job.open == 0:
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

    def _drive(self) -> None:
        """Step the engine while this service has samples running (other callers' requests
        step along; a caller waiting for the engine gets it between steps). A stop signal
        aborts this service's samples and ends their requests with preempt.Stopped."""
        while True:
            with self.wake:
                self.wake.wait_for(lambda: self.live or self.stopping, timeout=0.5)
                if self.stopping:
                    break
                if not self.live:
                    continue
            try:
                with self.gen.engine_held() as engine:
                    while self.live and not self.stopping:
                        preempt.check()
                        self.gen.step_routed(engine)
                        self.gen.yield_engine()
            except preempt.Stopped as e:
                self._abort(e)
                return
            except BaseException as e:  # noqa: BLE001 - every open request gets the error
                self._abort(e)
                return
        self._abort(preempt.Stopped("service stopped"))

    def _abort(self, error: BaseException) -> None:
        with self.gen.engine_held() as engine:
            if self.live:
                engine.abort_request(list(self.live))
            for rid in list(self.live):
                self.gen.drop_route(rid)
        jobs = {id(s.job): s.job for s in self.live.values()}
        self.live.clear()
        for job in jobs.values():
            self.done.put(Result(job.request.tag, error=error))
