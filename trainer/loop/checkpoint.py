"""Checkpoint, resume and preemption stops of a run: the run dir's checkpoint/ through
trainer/rundir.py, and the agreement between ranks on when to save and stop.

Why a module of its own: every step here is a collective protocol (barriers, one broadcast
verdict, DeepSpeed's collective save) that must line up on every rank; kept together it can be
read and checked as one. `_Run` (trainer/loop/train.py) mixes this class in; the methods use the
run's `c`, `dir`, `main`, `device`, `engine`, `pool`, `ctx`, `step`, `counters`, `acc`, and
keep `saved` (step, time of the last save) and `notes` (the preemption record for status.json).

Checkpoints are written by every rank into one deterministic temp dir (DeepSpeed saves
collectively) and rank 0 swaps it in after a barrier.
"""

from __future__ import annotations

import random
import shutil
import sys
import time

import torch

from trainer import preempt, rundir
from trainer.dist.groups import all_reduce_floats, barrier, broadcast_object


class Checkpointing:
    """Resume, checkpoint and preemption stops of `_Run` (see the module doc)."""

    def _resume(self) -> None:
        """Load the latest checkpoint if there is one (every rank), dropping metrics rows past
        its step; without one, start from scratch with an empty metrics file."""
        if self.main:
            for stale in self.dir.glob("checkpoint.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
        barrier()  # nobody looks for a checkpoint while rank 0 is still cleaning up
        ck = broadcast_object(rundir.checkpoint_dir(self.dir))
        self.resumed = ck is not None
        self.resume_evals = []
        if ck is None:
            if self.main:
                rundir.truncate_metrics(self.dir, None)
            return
        self.engine.load(ck / "engine")
        s = torch.load(ck / "state.pt", weights_only=False)
        self.step, self.counters, self.acc = s["step"], s["counters"], s["acc"]
        self.pool.load_state_dict(s["pool"])
        torch.set_rng_state(s["torch_rng"])
        random.setstate(s["py_rng"])
        self.source_state = s.get("source")  # the rollout source's (trainer/generation/offpolicy.py Context)
        if s.get("lag_max_window") is not None:  # saved between two metrics rows
            self.lag_max_window = s["lag_max_window"]
        evals = self._unwritten_evals(ck, s.get("pending_evals", []))
        barrier()  # every rank has read checkpoint/ before rank 0 may replace it
        if self.main:
            rundir.truncate_metrics(self.dir, self.step)
        self.resume_evals = broadcast_object(evals)

    def _unwritten_evals(self, ck, pending: list[dict]
                         ) -> list[tuple[int, dict, dict | None, dict]]:
        """Rank 0: the checkpoint's launched evals whose lines are not in metrics.jsonl (an eval
        that finished after the save wrote its line, and is not redone: no line is written
        twice), with the step's weights where the checkpoint kept them (hf, an earlier step)
        and the chunks already done (EvalJob.done: only the rest is decoded again)."""
        if not self.main:
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

    def checkpoint(self) -> None:
        """Model, optimizer, scheduler, RNG, pool, counters. Every rank writes into the same
        deterministic temp dir (DeepSpeed's save is a collective; the torch engine's state is
        identical on all ranks, so rank 0 alone saves it); rank 0 swaps it in atomically."""
        self.counters["gen_counter"] = self.ctx.gen_counter
        tmp = self.dir / f"checkpoint.tmp-{self.step}"
        if self.main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        barrier()
        if self.main or getattr(self.engine, "collective_save", False):
            self.engine.save(tmp / "engine")
        barrier()
        if self.main:
            torch.save({"step": self.step, "counters": dict(self.counters),
                        "acc": dict(self.acc), "pool": self.pool.state_dict(),
                        "torch_rng": torch.get_rng_state(), "py_rng": random.getstate(),
                        "source": self.ctx.source_state(),
                        "lag_max_window": getattr(self, "lag_max_window", None),
                        "pending_evals": self._save_pending_evals(tmp)},
                       tmp / "state.pt")
            rundir.commit_checkpoint(self.dir, tmp)
        barrier()
        self.saved = (self.step, time.monotonic())  # for every_minutes and the preemption stop

    def _save_pending_evals(self, tmp) -> list[dict]:
        """The launched evals whose lines are not written yet (rank 0's eval worker), for the
        resume to redo: each with its row (its step's counters) and, for an earlier step's
        hf eval, that step's weights (this checkpoint holds only this step's), and the chunks
        it has finished (EvalJob.done): an eval longer than a job still ends, over several."""
        worker = getattr(self, "evals", None)
        out = []
        for job in worker.pending() if worker is not None else []:
            # dict(): one C-level copy under the GIL while the worker may add a chunk
            e = {"step": job.step, "row": job.row, "weights": None, "done": dict(job.done)}
            if job.weights is not None and job.step != self.step:
                e["weights"] = f"eval-weights-{job.step}.pt"
                torch.save(job.weights, tmp / e["weights"])
            out.append(e)
        return out

    def start_attempt(self) -> None:
        """Carry the preemption record over from earlier attempts; note where this one
        starts. The wall-clock checkpoint timer starts now (a resume has just loaded one)."""
        prev = broadcast_object(rundir.read_status(self.dir))
        self.notes = {"preemptions": list(prev.get("preemptions", []))}
        if self.step:
            self.notes["resumed_from"] = self.step
            if self.main:
                print(f"[trainer] resumed from the checkpoint at step {self.step}",
                      file=sys.stderr, flush=True)
        self.saved = (self.step, time.monotonic())
        preempt.at_step(self.step + 1)  # a signal during start-up or the first eval: this step

    def boundary_flags(self) -> tuple[bool, bool]:
        """At a step boundary, agreed by every rank in one all-reduce (so DeepSpeed's
        collective save lines up): (a stop signal reached some rank, `checkpoint.every_minutes`
        has passed since the last save on rank 0's clock)."""
        every = self.c.checkpoint.every_minutes
        due = (every is not None and self.main
               and time.monotonic() - self.saved[1] >= every * 60)
        worker = getattr(self, "evals", None)
        failed = worker is not None and worker.failed() is not None
        stop, due, failed = all_reduce_floats(
            [float(preempt.requested()), float(due), float(failed)], self.device, "max")
        if failed:  # every rank stops here; rank 0 raises the worker's error
            raise RuntimeError("the eval worker failed") from (worker.failed() if worker else None)
        return bool(stop), bool(due)

    def save_eval_progress(self) -> None:
        """Rank 0, at a stop, after the checkpoint: end the eval worker (the stop flag ends
        its decode at the next step) and record the chunks its pending evals finished since
        the checkpoint was written (that save may be this step's eval-point save, taken
        while the eval had just begun): an eval longer than a job goes on from there."""
        worker = getattr(self, "evals", None)
        if not self.main or worker is None:
            return
        worker.close()
        progress = {job.step: dict(job.done) for job in worker.pending() if job.done}
        if progress:
            rundir.write_eval_progress(self.dir, progress)

    def stop_for_preemption(self) -> None:
        """Record the stop (status.json, stderr, trainer.preempt) after the boundary's save,
        with the eval progress made since it (save_eval_progress)."""
        self.save_eval_progress()
        self.notes["preemptions"].append({"signal_in_step": preempt.signal_step(),
                                          "checkpoint_step": self.step})
        preempt.mark_stopped(self.step)
        self.status("running")  # still running as far as the study goes: the job requeues
        if self.main:
            print(f"[trainer] stop signal: checkpointed at step {self.step}, stopping for the "
                  "requeue", file=sys.stderr, flush=True)
