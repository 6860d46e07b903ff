"""Checkpoint, resume and preemption stops of a run: the run dir's checkpoint/ through
trainer/rundir.py, and the agreement between ranks on when to save and stop.

Why a module of its own: every step here is a collective protocol (barriers, one broadcast
verdict, DeepSpeed's collective save) that must line up on every rank; kept together it can be
read and checked as one. A checkpoint holds the engine (weights, optimizer, scheduler) and the
run's state (trainer/loop/state.py TrainState: exactly its fields), plus the weights of an
earlier step's eval that is still running (hf). `Checkpoints` also keeps the attempt's record
for status.json: when it last saved, and the preemptions so far.

Checkpoints are written by every rank into one deterministic temp dir (DeepSpeed saves
collectively) and rank 0 swaps it in after a barrier.
"""

from __future__ import annotations

import pickle
import random
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Callable, Optional

import torch

from trainer import rundir
from trainer.dist import preempt
from trainer.config import TrainConfig
from trainer.dist.groups import all_reduce_floats, barrier, broadcast_object
from trainer.loop.eval_point import EvalPoint
from trainer.loop.setup import Parts
from trainer.loop.state import TrainState

# Where the classes a checkpoint pickles (a rollout source's batches and calls) lived before
# trainer/ had subpackages, and before the rollout types moved below the generation service
# (trainer/rollouts.py): a run checkpointed then resumes now.
_MOVED = {"trainer.offpolicy": "trainer.generation.offpolicy",
          "trainer.pipeline_data": "trainer.generation.pipeline_data",
          "trainer.length": "trainer.rollouts"}
_MOVED_TYPES = {("trainer.generation.rollout", "Rollout"): "trainer.rollouts",
                ("trainer.generation.rollout", "Generation"): "trainer.rollouts"}


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        module = _MOVED.get(module, module)
        return super().find_class(_MOVED_TYPES.get((module, name), module), name)


def load_state(path: Path) -> dict:
    """A checkpoint's state.pt (TrainState.to_checkpoint's dict)."""
    # torch.load unpickles through pickle_module.Unpickler (torch/serialization.py _load)
    moved = SimpleNamespace(__name__="pickle", Unpickler=_Unpickler,
                            load=lambda f, **kw: _Unpickler(f, **kw).load())
    return torch.load(path, weights_only=False, pickle_module=moved)


class Checkpoints:
    """Resume, checkpoint and preemption stops (see the module doc)."""

    def __init__(self, config: TrainConfig, run_dir: Path, parts: Parts) -> None:
        self.c, self.dir, self.parts = config, run_dir, parts
        self.saved = (0, time.monotonic())  # (step, time) of the last save or the start
        self.notes: dict = {}  # status.json's preemption record (start_attempt)

    def resume(self, state: TrainState) -> tuple[bool, list]:
        """Load the latest checkpoint if there is one (every rank) into the engine and
        `state`, dropping metrics rows past its step; without one, start from scratch with an
        empty metrics file. Returns (resumed, the evals to launch again: see unwritten_evals)."""
        main = self.parts.main
        if main:
            for stale in self.dir.glob("checkpoint.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
        barrier()  # nobody looks for a checkpoint while rank 0 is still cleaning up
        ck = broadcast_object(rundir.checkpoint_dir(self.dir))
        if ck is None:
            if main:
                rundir.truncate_metrics(self.dir, None)
            return False, []
        self.parts.engine.load(ck / "engine")
        state.restore(load_state(ck / "state.pt"))
        evals = self.unwritten_evals(ck, state.pending_evals)
        barrier()  # every rank has read checkpoint/ before rank 0 may replace it
        if main:
            rundir.truncate_metrics(self.dir, state.step)
        return True, broadcast_object(evals)

    def unwritten_evals(self, ck: Path, pending: list[dict]
                        ) -> list[tuple[int, dict, Optional[dict], dict]]:
        """Rank 0: the checkpoint's launched evals whose lines are not in metrics.jsonl (an
        eval that finished after the save wrote its line, and is not redone: no line is
        written twice), with the step's weights where the checkpoint kept them (hf, an
        earlier step) and the chunks already done (EvalJob.done: only the rest is decoded
        again)."""
        if not self.parts.main:
            return []
        written = {r[rundir.STEP] for r in rundir.read_metrics(self.dir)}
        later = rundir.read_eval_progress(ck)  # chunks finished after the save, if any
        out = []
        for e in pending:
            if e["step"] in written:
                continue
            f = e.get("weights")
            done = {**e.get("done", {}), **later.get(e["step"], {})}
            out.append((e["step"], e["row"],
                        torch.load(ck / f, weights_only=True) if f else None, done))
        return out

    def save(self, state: TrainState, source_state: Callable[[], object],
             evals: EvalPoint) -> None:
        """Engine and run state (`source_state`: the rollout source's, taken on rank 0 as
        the state is written). Every rank writes into the same deterministic temp dir
        (DeepSpeed's save is a collective; the torch engine's state is identical on all
        ranks, so rank 0 alone saves it); rank 0 swaps it in atomically."""
        main, engine = self.parts.main, self.parts.engine
        tmp = self.dir / f"checkpoint.tmp-{state.step}"
        if main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        barrier()
        if main or engine.collective_save:
            engine.save(tmp / "engine")
        barrier()
        if main:
            state.rng = (torch.get_rng_state(), random.getstate())
            state.source = source_state()
            state.pending_evals = self._pending_evals(tmp, evals, state.step)
            torch.save(state.to_checkpoint(), tmp / "state.pt")
            rundir.commit_checkpoint(self.dir, tmp)
        barrier()
        self.saved = (state.step, time.monotonic())  # for every_minutes and the preemption stop

    def _pending_evals(self, tmp: Path, evals: EvalPoint, step: int) -> list[dict]:
        """The launched evals whose lines are not written yet (rank 0's eval worker), for the
        resume to redo: each with its row (its step's counters) and, for an earlier step's
        hf eval, that step's weights (this checkpoint holds only this step's), and the chunks
        it has finished (EvalJob.done): an eval longer than a job still ends, over several."""
        out = []
        for job in evals.pending():
            # dict(): one C-level copy under the GIL while the worker may add a chunk
            e = {"step": job.step, "row": job.row, "weights": None, "done": dict(job.done)}
            if job.weights is not None and job.step != step:
                e["weights"] = f"eval-weights-{job.step}.pt"
                torch.save(job.weights, tmp / e["weights"])
            out.append(e)
        return out

    def start_attempt(self, step: int) -> None:
        """Carry the preemption record over from earlier attempts; note where this one
        starts. The wall-clock checkpoint timer starts now (a resume has just loaded one)."""
        prev = broadcast_object(rundir.read_status(self.dir))
        self.notes = {"preemptions": list(prev.get("preemptions", []))}
        if step:
            self.notes["resumed_from"] = step
            if self.parts.main:
                print(f"[trainer] resumed from the checkpoint at step {step}",
                      file=sys.stderr, flush=True)
        self.saved = (step, time.monotonic())
        preempt.at_step(step + 1)  # a signal during start-up or the first eval: this step

    def boundary_flags(self, evals: EvalPoint) -> tuple[bool, bool]:
        """At a step boundary, agreed by every rank in one all-reduce (so DeepSpeed's
        collective save lines up): (a stop signal reached some rank, `checkpoint.every_minutes`
        has passed since the last save on rank 0's clock)."""
        every = self.c.checkpoint.every_minutes
        due = (every is not None and self.parts.main
               and time.monotonic() - self.saved[1] >= every * 60)
        failed = evals.failed()
        stop, due, failed_any = all_reduce_floats(
            [float(preempt.requested()), float(due), float(failed is not None)],
            self.parts.device, "max")
        if failed_any:  # every rank stops here; rank 0 raises the worker's error
            raise RuntimeError("the eval worker failed") from failed
        if stop:
            preempt.peer_stopped()  # a rank the signal missed records it (and stops) as well
        return bool(stop), bool(due)

    def save_eval_progress(self, evals: EvalPoint) -> None:
        """Rank 0, at a stop, after the checkpoint: end the eval worker (the stop flag ends
        its decode at the next step) and record the chunks its pending evals finished since
        the checkpoint was written (that save may be this step's eval-point save, taken
        while the eval had just begun): an eval longer than a job goes on from there."""
        if not self.parts.main:
            return
        if evals.worker is not None:
            evals.worker.close()
        # (the pending evals include the last one held for every node's engines, final_eval.py)
        progress = {job.step: dict(job.done) for job in evals.pending() if job.done}
        if progress:
            rundir.write_eval_progress(self.dir, progress)

    def record_stop(self, step: int) -> None:
        """The stop in the preemption record (status.json) and in trainer.dist.preempt."""
        self.notes["preemptions"].append({"signal_in_step": preempt.signal_step(),
                                          "signal_in_phase": preempt.signal_phase(),
                                          "checkpoint_step": step})
        preempt.mark_stopped(step)
