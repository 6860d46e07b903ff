"""The engine host's own process (trainer/generation/host.py: why, and the trainer's side):
the engines and their streams, served to the trainer over a local socket.

    python -m trainer.generation.engine_host PARENT_PID SOCKET   (the key on stdin)
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.managers import BaseManager
from pathlib import Path
from typing import Optional

import torch

from trainer.config import TrainConfig
from trainer.dist import preempt
from trainer.generation.pins import Pin
from trainer.generation.push import (_finish, _join_update_group, _receive_weights,
                                     _rpc_in_thread, _worker_rank)
from trainer.generation.requests import Request, Result
from trainer.rollouts import Generation


# When a generation node's trainer last renewed its lease (time.monotonic; None: not yet)
_LEASE: list[Optional[float]] = [None]


class EngineHost:
    """The host process's side: the engines and their streams (see the module doc)."""

    def __init__(self, config: TrainConfig, starts: list[tuple[dict, dict]],
                 eos: Optional[int], tokenizer, threads: int, rank: int) -> None:
        from trainer.generation.replicas import ReplicaGenerator
        from trainer.generation.vllm_engine import VLLMGenerator

        torch.set_num_threads(threads)
        self.config, self.tok = config, tokenizer
        who = f"the engine host of rank {rank}"
        engines = [VLLMGenerator.started(config, kw, env, eos, who) for kw, env in starts]
        self.gen = engines[0] if len(engines) == 1 else ReplicaGenerator.over(config, engines)
        # every stream by id; a stopped one stays, as in process: its callers read the
        # results its stop ended (preempt.Stopped) after the stop
        self.streams: dict[int, object] = {}
        self._ids = itertools.count()
        self._push: Optional[tuple] = None
        self._joins: list = []
        self.lease()

    def lease(self) -> None:
        """The trainer is alive (a generation node's host ends without it: serve)."""
        _LEASE[0] = time.monotonic()

    # -- generation ------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], n: int, max_new_tokens: int,
                 temperature: float, top_p: float, seed: Optional[int]) -> Generation:
        return self.gen.generate(prompts, n=n, max_new_tokens=max_new_tokens,
                                 temperature=temperature, top_p=top_p, seed=seed)

    def version(self) -> int:
        return self.gen.version

    def head_dtype(self) -> str:
        return self.gen.head_dtype

    def engine_count(self) -> int:
        return len(self.gen.engines)

    # -- streams (stream.py StreamService, one per caller) ---------------------------------
    def stream_open(self) -> int:
        from trainer.generation.stream import StreamService

        svc = StreamService(self.gen, self.config, self.tok)
        svc.start()
        sid = next(self._ids)
        self.streams[sid] = svc
        return sid

    def submit(self, sid: int, request: Request) -> None:
        self.streams[sid].submit(request)

    def take(self, sid: int, timeout: Optional[float]) -> list[Result]:
        """The stream's finished requests: the first within `timeout` s, then every one ready."""
        done = self.streams[sid].done
        try:
            out = [done.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                out.append(done.get_nowait())
            except queue.Empty:
                return out

    def stream_stop(self, sid: int, timeout_s: float) -> None:
        self.streams[sid].stop(timeout_s)

    # -- pins (pins.py) --------------------------------------------------------------------
    def pin(self, want: int) -> Optional[Pin]:
        return self.gen.pins.take(want)

    def unpin(self, pin: Pin) -> None:
        self.gen.pins.release(pin)

    def pinnable(self, timeout: float) -> bool:
        return self.gen.pins.wait_pinnable(timeout)

    def pins_wait(self, timeout: float) -> None:
        self.gen.pins.wait(timeout)

    # -- the weight push (the trainer broadcasts between push_begin and push_end) ----------
    def groups_open(self, host: str, ports: list[int], backend: str,
                    timeout_s: float) -> list[int]:
        """Start every engine's workers joining its update group (the trainer joins as rank 0
        meanwhile); returns each group's size."""
        worlds = []
        for e, port in zip(self.gen.engines, ports):
            world = 1 + len(e.llm.collective_rpc(_worker_rank))
            self._joins.append(_rpc_in_thread(e.llm, _join_update_group,
                                              (host, port, world, backend, timeout_s)))
            worlds.append(world)
        return worlds

    def groups_done(self) -> None:
        joins, self._joins = self._joins, []
        for t, errors in joins:
            _finish(t, errors)

    def push_begin(self, specs: list, force: bool) -> Optional[list[int]]:
        """Pause the engines a push reaches at their next step boundary and start their
        workers' receive of `specs`; their indices, or None while an eval holds the one
        engine (the trainer asks again: vllm_engine.py VLLMGenerator.sync_weights)."""
        pins = self.gen.pins
        targets = pins.begin_push(force=force or pins.exclusive)
        if targets is None:
            return None
        engines = [self.gen.engines[i] for i in targets]
        held: list = []
        paused = contextlib.ExitStack()
        try:
            for e in engines:
                e._take_engine()
                held.append(e)
                paused.enter_context(e.paused())
            receive = [_rpc_in_thread(e.llm, _receive_weights, (specs,)) for e in engines]
        except BaseException:
            paused.close()
            for e in held:
                e._gen_lock.release()
            pins.end_push(targets, None)
            raise
        self._push = (targets, engines, held, paused, receive)
        return targets

    def push_wait(self, timeout: float) -> None:
        self.gen.pins.wait_released(timeout)

    def push_end(self, version: int, cut: bool) -> None:
        """The broadcast ended (`cut`: a stop ended it early): the workers' loads finish, the
        new weights are labelled `version` (not when cut: the engines are `torn`), and the
        engines resume."""
        targets, engines, held, paused, receive = self._push
        self._push = None
        done = None
        try:
            for t, errors in receive:
                _finish(t, errors)
            for e in engines:
                e.torn = cut
                if not cut:
                    e.loaded(version)
            done = None if cut else version
        finally:
            paused.close()
            for e in held:
                e._gen_lock.release()
            self.gen.pins.end_push(targets, done)

    # -- stops and the end -----------------------------------------------------------------
    def stop_signal(self) -> None:
        """The trainer got a stop signal: this process acts as if it got it too."""
        preempt.request(signal.SIGUSR2)

    def close(self) -> None:
        for svc in self.streams.values():
            svc.stop(5.0)
        self.gen.close()


class _Manager(BaseManager):
    pass


_Manager.register("EngineHost", EngineHost)


def spawn(address: str, authkey: bytes, record: Optional[dict] = None) -> subprocess.Popen:
    """Start a host process (`serve`, below) at `address`: a Unix socket, or `tcp:FILE`
    with `record` (a generation node's, node_host.py). It runs this interpreter with this
    `trainer` package first on its path, whatever the working directory; the key goes over
    stdin, never on a command line."""
    # the folder holding this `trainer` package (trainer/generation/engine_host.py, three up)
    path = [os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        path + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.Popen([sys.executable, "-m", "trainer.generation.engine_host",
                             str(os.getpid()), address], stdin=subprocess.PIPE, text=True,
                            env=env)
    proc.stdin.write(authkey.hex() + "\n")
    if record is not None:
        proc.stdin.write(json.dumps(record) + "\n")
    proc.stdin.close()
    return proc


def serve(parent: int, address: str) -> None:
    """The host process's main (`python -m trainer.generation.engine_host PARENT ADDRESS`, the
    connection's key on stdin): serve EngineHost until the trainer shuts it down. ADDRESS is a
    Unix socket (the rank's own host, trainer/generation/host.py) or `tcp:FILE` (a generation
    node's host, trainer/generation/node_host.py: it listens on every interface and writes its
    address, key and engines to FILE, a second stdin line giving the rest of that record).
    A process started from the command line, not multiprocessing's spawn, so that nothing of
    the trainer's own __main__ (a launcher's script) runs again here. Stop signals set the
    flag its streams check, as in the trainer; Ctrl-C reaches the trainer, which forwards it
    (stop_signal). It ends with its parent (its engines' processes follow it); a generation
    node's host also ends when its trainer stops renewing its lease (a trainer that died)."""
    authkey = bytes.fromhex(sys.stdin.readline().strip())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGUSR2, signal.SIGTERM):
        preempt.install(sig)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="ablate-host-watch", daemon=True).start()
    if not address.startswith("tcp:"):
        _Manager(address=address, authkey=authkey).get_server().serve_forever()
        return
    record = json.loads(sys.stdin.readline())
    server = _Manager(address=("", 0), authkey=authkey).get_server()
    record.update(host=socket.gethostname(), port=server.address[1], authkey=authkey.hex(),
                  pid=os.getpid(), ppid=parent)
    publish(Path(address[len("tcp:"):]), record)
    threading.Thread(target=_lease_watch, args=(record["first_s"], record["lease_s"]),
                     name="ablate-host-lease", daemon=True).start()
    server.serve_forever()


def publish(path: Path, record: dict) -> None:
    """Write a generation node's host record atomically, readable by this user only (it holds
    the connection's key)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)


def _lease_watch(first_s: float, lease_s: float) -> None:
    """End a generation node's host whose trainer is gone: no EngineHost made within `first_s`
    of the start (the trainer never came), or no lease renewed for `lease_s` after it was."""
    start = time.monotonic()
    while True:
        time.sleep(1.0)
        last = _LEASE[0]
        if (last is None and time.monotonic() - start > first_s) or \
                (last is not None and time.monotonic() - last > lease_s):
            print(f"[engine host] no trainer for {first_s if last is None else lease_s:.0f} s: "
                  f"exiting", file=sys.stderr, flush=True)
            os._exit(1)


if __name__ == "__main__":
    serve(int(sys.argv[1]), sys.argv[2])
