"""Evals on every engine of every node, at the eval's step's weights, with rollouts paused.

Why: in a pipeline run with vLLM on several nodes an eval pinned to a few of rank 0's node's
engines (trainer/generation/pins.py) never got more engines as the run grew: at the paper's
eval (1,000 prompts x 16, ~230 M tokens) 18 h on 3 engines, spanning ~5 four-hour jobs whose
resumes decoded the rest on later weights, and from 3 nodes on the evals piled up. What the
trainers labs use do instead: prime-rl's orchestrator pauses weight updates and rollout
scheduling for a blocking eval and draws every inference server; PipelineRL's actor runs its
test loop on every server with the train loop's scheduling paused (ServiceNow/PipelineRL
pipelinerl/actor.py run_actor_loop: `train_loop.is_scheduling_paused = True` until the test
loop ends); verl's fit() calls _validate() synchronously. So here, in a job with several
feeders (trainer/generation/feeders.py: every node's local rank 0, over its own engines), every
eval is held at its step: every node's feeder stops starting rollout groups (groups in flight
finish; GroupStream.hold), decodes its share of the eval's chunks on its engines, which hold
the step's weights (the step's push reached every node, and no step is trained meanwhile, so
no push comes), and rank 0 writes the row; then rollouts resume and training goes on. A stop
in the middle saves every node's finished chunks with the checkpoint of that very step (no
step was trained since), so the resumed job, pushed those weights at start, decodes the rest
on them: `eval/version_min == eval/version_max ==` the step for an eval of any length. The
time plan charges it as wall the training waits (trainer/plan/time_plan.py fleet_eval).

How (every rank; `finish`):
- the chunks are the eval's own (eval_service.engine_chunks: fixed by the config, with their
  seeds), dealt by stride over the feeders (chunk i to feeder i mod n); chunks a checkpoint says
  are done (an eval a requeue cut short) are not decoded again;
- each feeder decodes its share on a generation service over its node's engines in a thread,
  and every rank agrees every POLL_S on whether any is still busy, a stop arrived or one failed
  (one small all-reduce: no rank waits in a collective for the eval's hours, which the group's
  timeout would end);
- then the shares' results are gathered to rank 0, merged into the eval's EvalJob.done (what a
  checkpoint keeps: a stop here saves every node's finished chunks, and the resume decodes only
  the rest), and rank 0 waits for its worker's earlier evals (rows land in step order) and
  writes the row: the same pass rate and eval/version_min/max a single node's eval computes.

ppo_off_policy with vLLM has the same feeders (no rollout is in flight between its steps, so
nothing is held). Where it does not apply (the hf backend, one feeder: one node) evals go to
rank 0's eval worker beside training (trainer/generation/eval_service.py, pins.py).
"""

from __future__ import annotations

import threading
import time
from typing import Optional

from trainer.dist import preempt
from trainer.dist.abort import error_line
from trainer.dist.groups import all_gather_objects, all_reduce_floats, broadcast_object
from trainer.generation import eval_service
from trainer.generation.service import make_service
from trainer.rundir import PASS_RATE

POLL_S = 1.0  # seconds between the ranks' agreements while the eval decodes


def spread(config, source) -> Optional[object]:
    """The feeders an eval spreads over (the same answer on every rank), or None where it
    does not (module doc)."""
    feeders = getattr(source, "feeders", None)
    if not eval_service.uses_service(config, source) or feeders is None or feeders.count < 2:
        return None
    return feeders


def share(chunks: list[tuple[int, int, int]], done: dict, index: Optional[int],
          count: int) -> list[tuple[int, int, int]]:
    """Feeder `index`'s chunks of `count` (every count-th from its index), less those done;
    none for a rank that does not feed (index None)."""
    if index is None:
        return []
    return [ch for ch in chunks[index::count] if ch[0] not in done]


def _decode(svc, step: int, mine: list, evals, out: dict, errors: list) -> None:
    """A feeder's share through its service (the decoding thread); results into `out`."""
    p, c = evals.parts, evals.c
    try:
        eval_service.service_eval(svc, step, mine, p.task, p.eval_problems, p.eval_prompts, c,
                                  p.tok, done=out,
                                  all_at_once=eval_service.cpu_queue_limit() is None)
    except BaseException as e:  # noqa: BLE001 - a stop, or the failure every rank must see
        errors.append(e)


def _agree(thread: Optional[threading.Thread], errors: list, device) -> tuple[bool, bool]:
    """Wait while any feeder decodes; every rank learns together that all are done, or that a
    stop reached one, or that one failed. Returns (stopped, failed)."""
    while True:
        if thread is not None:
            thread.join(timeout=POLL_S)
        else:
            time.sleep(POLL_S)
        failed = any(not isinstance(e, preempt.Stopped) for e in errors)
        busy = thread is not None and thread.is_alive() and not failed
        still, stop, bad = all_reduce_floats(
            [float(busy), float(preempt.requested()), float(failed)], device, "max")
        if stop:
            preempt.peer_stopped()  # ends this rank's decode at its next step too
        if bad or stop or not still:
            return bool(stop), bool(bad)


def finish(evals, source) -> bool:
    """The held eval (EvalPoint.final: the step's, or the run's last) over every node's
    engines with rollouts paused (every rank calls it; module doc). False when it does not
    apply here (nothing done: at the run's end the caller drains rank 0's worker as before).
    Raises preempt.Stopped after merging what every node finished, when a stop arrived."""
    c, p = evals.c, evals.parts
    feeders = spread(c, source)
    if feeders is None:
        return False
    job = evals.final if p.main else None
    head = broadcast_object(None if job is None else (job.step, dict(job.done)))
    if head is None:
        return False
    step, done = head
    chunks = eval_service.engine_chunks(p.eval_prompts, c, p.tok, evals.seed)
    mine = share(chunks, done, feeders.share, feeders.count)
    out: dict = {}
    errors: list = []
    svc = thread = None
    t0 = time.perf_counter()
    hold = getattr(source, "hold_rollouts", None)  # no new rollout group while it decodes
    if hold is not None:
        hold(True)
    if mine:
        svc = make_service(eval_service.service_generator(source), c, p.tok,
                           name="ablate-final-eval")
        thread = threading.Thread(target=_decode, args=(svc, step, mine, evals, out, errors),
                                  name="ablate-final-eval", daemon=True)
        thread.start()
    try:
        stopped, failed = _agree(thread, errors, p.device)
    finally:
        if svc is not None:
            svc.stop()  # a stop ends the decode at its next step; its finished chunks stay
        if thread is not None:
            thread.join(timeout=60)
        if hold is not None:
            hold(False)
    why = next((error_line(e) for e in errors if not isinstance(e, preempt.Stopped)), None)
    every = all_gather_objects((dict(out), why))
    if p.main:
        for got, _ in every:
            job.done.update(got)  # the checkpoint's record of this eval, every node's chunks
    failures = [w for _, w in every if w]
    if failures:
        raise RuntimeError(f"the final eval failed on a node: {failures[0]}")
    if stopped or failed:
        raise preempt.Stopped("stop signal during the final eval")
    if p.main:
        evals.finish()  # earlier evals' rows first: rows land in step order
        _write(evals, job, chunks, time.perf_counter() - t0)
    return True


def _write(evals, job, chunks: list, seconds: float) -> None:
    """Rank 0: the row from every chunk's counts (service_eval only sums them when every
    chunk is done: nothing is decoded), then the eval is no longer pending."""
    p, c = evals.parts, evals.c
    rate, versions = eval_service.service_eval(None, job.step, chunks, p.task, p.eval_problems,
                                               p.eval_prompts, c, p.tok, done=job.done)
    evals.write_row({**job.row, PASS_RATE: rate, eval_service.EVAL_SECONDS: seconds,
                     **versions})
    evals.final = None
