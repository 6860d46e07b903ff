"""A failed rank ends the whole job within seconds, and the run's status names the root cause.

Why: when one rank raises, the others sit in their next collective until the process group's
timeout (engine.collective_timeout_minutes: 120 min for the paper's evals), holding every GPU
of the job; NCCL does not notice a peer that died (its watchdog acts on timeouts and errors,
not on a missing peer). And status.json said what rank 0 saw last ("Engine core
initialization failed"), while the cause sat in another rank's or another process's log.

How: every rank of a multi-process job runs a watchdog thread on the job's rendezvous store
(a TCPStore client to the one torch.distributed's env:// init made on MASTER_ADDR:MASTER_PORT,
served by rank 0's process). A rank that fails puts one line, "rank R: Type: message" of its
root cause, under ABORT_KEY (compare_set: the first failure wins) before it exits. Every
watchdog polls the key every `poll_s`; on seeing it, rank 0 writes that line as the run's
error (the callback: status.json `failed`) and each rank os._exit()s: no collective is waited
for, no process group is torn down politely (a destroy would itself wait on the peers). If the
store itself is gone, rank 0's process died: the watchdog exits the same way.
"""

from __future__ import annotations

import datetime
import os
import sys
import threading
import time
from typing import Callable, Optional

ABORT_KEY = "ablate/abort"
EXIT_CODE = 70  # a peer failed (the failing rank exits with its own exception)


def error_line(exc: BaseException) -> str:
    """The root cause of `exc` in one line, "Type: first line of message": the innermost
    exception of its __cause__ / __context__ chain (an engine's own error rather than the
    RuntimeError that wraps it), unless an outer one says it carries the cause itself
    (`root_cause` attribute, e.g. trainer/generation/vllm_args.py EngineStartError)."""
    seen, e = set(), exc
    while True:
        if getattr(e, "root_cause", None):
            return str(e.root_cause).splitlines()[0][:500]
        nxt = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
        if nxt is None or id(nxt) in seen:
            break
        seen.add(id(e))
        e = nxt
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")[:500]


class FailFast:
    """The job-wide abort of one rank (a no-op in a single process)."""

    def __init__(self, rank: int, world: int, master_addr: str, master_port: int,
                 on_abort: Optional[Callable[[str], None]] = None, poll_s: float = 2.0) -> None:
        self.rank, self.world, self.poll_s = rank, world, poll_s
        self.on_abort = on_abort
        self._store = None
        self._stop = threading.Event()
        if world > 1:
            import torch.distributed as dist

            # A client of the rendezvous store (rank 0's process serves it): its own socket,
            # so polling from this thread never interleaves with the process group's use.
            self._store = dist.TCPStore(master_addr, master_port, world, is_master=False,
                                        timeout=datetime.timedelta(seconds=60),
                                        wait_for_workers=False)
            threading.Thread(target=self._watch, name="ablate-failfast", daemon=True).start()

    def _watch(self) -> None:
        misses = 0
        while not self._stop.wait(self.poll_s):
            try:
                if not self._store.check([ABORT_KEY]):
                    misses = 0
                    continue
                reason = self._store.get(ABORT_KEY).decode(errors="replace")
            except Exception as e:  # the store's server (rank 0's process) is gone
                misses += 1
                if misses < 2:
                    continue
                reason = f"rank 0's process is gone ({type(e).__name__})"
            if self._stop.is_set():
                return
            self._abort(reason)

    def _abort(self, reason: str) -> None:
        try:
            if self.on_abort is not None:
                self.on_abort(reason)
            print(f"ablate: aborting rank {self.rank}: {reason}", file=sys.stderr, flush=True)
        finally:
            os._exit(EXIT_CODE)

    def fail(self, exc: BaseException) -> str:
        """This rank failed with `exc`: tell every rank. The job's root cause is the first
        failure (a peer's "connection closed" that follows it is a consequence): its line."""
        line = f"rank {self.rank}: {error_line(exc)}"
        if self._store is not None:
            try:  # compare_set returns what the key holds now: ours, or an earlier failure's
                first = self._store.compare_set(ABORT_KEY, "", line)
                return first.decode(errors="replace") if isinstance(first, bytes) else str(first)
            except Exception:
                pass  # the store is gone: the peers' watchdogs see that instead
        return line

    def close(self) -> None:
        """The run ended normally: stop watching (the store goes away with rank 0)."""
        self._stop.set()


def exit_soon(after_s: float = 15.0, code: int = 1) -> None:
    """After a failure: end this process in `after_s` even if its normal exit hangs (a process
    group or engine shutdown waiting on peers that are gone)."""
    def _later() -> None:
        time.sleep(after_s)
        os._exit(code)

    threading.Thread(target=_later, name="ablate-exit", daemon=True).start()
