"""The engines' client in a process of its own: the engine host (rollout.vllm.client).

Why: the rank that starts a node's engines also trains. In process, it steps every engine's
client from its own interpreter: the stream's drivers (trainer/generation/stream.py: dealing,
KV rooms, each sample's routing), vLLM's output threads (ZMQ receive and msgpack decoding,
vllm/v1/engine/core_client.py `EngineCoreOutputQueueThread`) and its output processor. Their CPU
and GIL time delays that rank's update, and every other rank waits for it at the next
collective: measured on CPU at 6.2% and 42.2% of rank 0's update time (benchmarks/RESULTS.md
"Rank 0 and the rollout client"), at a fraction of a GPU node's token rate. The trainers labs
use keep rollout clients out of the training process: PipelineRL's actors, prime-rl's
orchestrator, verl's Ray rollout workers. So here, where the engines have GPUs of their own
(`auto`), the rank spawns one host process that holds them.

What runs where:
- the host (trainer/generation/engine_host.py EngineHost): the engines (VLLMGenerator, or
  ReplicaGenerator's set) with their vLLM clients, every stream over them (the pipeline's
  rollouts and each eval's), the pins;
- the training rank (HostedGenerator): the Generator protocol and the generation service over
  the host. Requests (prompt ids, seeds) go out and results (token ids, log-probs, versions)
  come back over a multiprocessing manager: one connection per calling thread (the rollout
  producer, the collector, the eval worker, the push), served by a thread each in the host, so
  they run at once as they do in process;
- the weights never cross it. A push is still the broadcast from the trainer's module over each
  engine's update group (trainer/generation/push.py), the trainer its rank 0. The host does
  the rest of VLLMGenerator.sync_weights: it pauses the engines a push reaches at their next
  step boundary and starts their workers' receive (push_begin); after the broadcast it labels
  the new weights and resumes them (push_end).
- A stop signal reaches the host as it reaches the trainer (the same handler: Slurm signals
  every process of the step), and the trainer's own flag is forwarded once; the host's
  streams then end their requests with preempt.Stopped, as in process.
- The host exits when the trainer's process is gone; the trainer's next call to a dead host
  raises, and the run fails like on any engine's death.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from multiprocessing.managers import BaseManager
from typing import Iterator, Optional

import torch

from trainer.config import TrainConfig
from trainer.dist import preempt
from trainer.dist.binding import current_binding
from trainer.dist.groups import group_timeout_s, rank
from trainer.generation.engine_host import spawn
from trainer.generation.node_host import find_host, hosts_dir
from trainer.generation.pins import Pin
from trainer.generation.push import (PushStop, _free_port, named_weights, send_weights,
                                     update_group, weight_specs)
from trainer.generation.requests import Request, Result, Weights
from trainer.generation.vllm_outputs import cpus
from trainer.rollouts import Generation


def in_host(config: TrainConfig) -> bool:
    """Does this rank's engines' client run in a host process (rollout.vllm.client)? `auto`:
    where its engines have GPUs of their own (a GPU node's split or generation node), never
    on CPU, where the proxy's engines decode in the trainer's cores anyway and a host would
    only add its start-up."""
    from trainer.plan.placement import client_in_host

    b = current_binding(config)
    return client_in_host(config.rollout.vllm.client,
                          not b.shared and any(len(gpus) for gpus in b.engines))


class _Manager(BaseManager):
    pass


_Manager.register("EngineHost")  # made in the host (engine_host.py); here, its proxy


def _start_host(timeout_s: float = 300.0) -> tuple[subprocess.Popen, "_Manager", str]:
    """Start this rank's own host and connect to it: (process, connected manager, its socket
    dir). `timeout_s` bounds its imports (seconds alone, more on a busy node)."""
    # a socket's path has at most 107 bytes (AF_UNIX); a job's TMPDIR can be long
    where = tempfile.mkdtemp(prefix="ablate-host-",
                             dir=None if len(tempfile.gettempdir()) < 64 else "/tmp")
    address = os.path.join(where, "host.sock")
    authkey = os.urandom(16)
    proc = spawn(address, authkey)
    manager = _Manager(address=address, authkey=authkey)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            manager.connect()
            return proc, manager, where
        except (FileNotFoundError, ConnectionRefusedError):
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                shutil.rmtree(where, ignore_errors=True)
                raise RuntimeError(f"the engine host did not start (exit {proc.wait()}); its "
                                   f"error is above in this job's log") from None
            time.sleep(0.05)


def _connect_node(node: int, timeout_s: float) -> tuple["_Manager", list[dict[str, str]]]:
    """Connect to generation node `node`'s host (node_host.py): (manager, its engines'
    placements). `timeout_s`: how long that node may take to publish (its task starts with
    this job's, beside the trainer's set-up)."""
    record = find_host(node, timeout_s)
    manager = _Manager(address=(record["host"], record["port"]),
                       authkey=bytes.fromhex(record["authkey"]))
    manager.connect()
    return manager, record["placements"]


def _stop_host(proc: Optional[subprocess.Popen], manager: "_Manager",
               grace_s: float = 10.0) -> None:
    """Ask the host's server to end, then make sure the process is gone (this rank's own; a
    generation node's task waits for its own)."""
    from multiprocessing.managers import dispatch

    with contextlib.suppress(Exception):  # a host already gone
        conn = manager._Client(manager._address, authkey=manager._authkey)
        try:
            dispatch(conn, None, "shutdown")
        finally:
            conn.close()
    if proc is None:
        return
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class _HostPins:
    """pins.py's interface, as eval_service.py and eval_point.py use it, over the host."""

    def __init__(self, host, n: int) -> None:
        self._host, self.n = host, n

    def take(self, want: int) -> Optional[Pin]:
        return self._host.pin(want)

    def release(self, pin: Pin) -> None:
        self._host.unpin(pin)

    def wait_pinnable(self, timeout: float) -> bool:
        return self._host.pinnable(timeout)

    def wait(self, timeout: float) -> None:
        self._host.pins_wait(timeout)


class HostedGenerator:
    """The Generator protocol on the training rank over an engine host (module doc)."""

    def __init__(self, config: TrainConfig, model: torch.nn.Module, tokenizer,
                 placements: list[Optional[dict[str, str]]], node: Optional[int] = None
                 ) -> None:
        """`placements`: each engine's (this rank's own host); `node`: a generation node's
        host to connect to instead (node_host.py), whose engines' placements it publishes."""
        from trainer.generation.vllm_args import engine_args, set_vllm_env
        from trainer.generation.vllm_engine import engine_files, max_positions

        set_vllm_env()  # before the spawn: the host inherits this process's choice
        self.config = config
        self.dtype = torch.float32 if config.precision.dtype == "fp32" else torch.bfloat16
        self._closed = threading.Event()
        self._ends: Optional[list[tuple]] = None  # each engine's update group, this end
        self._tmp = None
        if node is None:
            self._proc, self._manager, self._where = _start_host()
        else:
            self._proc, self._where = None, None
            self._manager, placements = _connect_node(node, group_timeout_s(config))
        self.remote = node is not None
        try:  # an engine that does not start (EngineStartError) ends its host too
            # a model only in memory is saved where a generation node can read it: the run
            # folder, on the filesystem the job's nodes share
            path, self._tmp = engine_files(config, model,
                                           str(hosts_dir()) if self.remote else None)
            starts = [engine_args(config, path, max_positions(model), p) for p in placements]
            self._host = self._manager.EngineHost(config, starts, tokenizer.eos_token_id,
                                                  tokenizer, torch.get_num_threads(), rank())
            host = (f"generation node {node}'s engine host at {self._manager.address[0]}:"
                    f"{self._manager.address[1]}" if self.remote else
                    f"its engine host pid {self._proc.pid} on CPUs {cpus(self._proc.pid)}")
            print(f"[trainer] CPU affinity: rank {rank()} pid {os.getpid()} on CPUs {cpus(0)}; "
                  f"{host}", flush=True)
            self.pins = _HostPins(self._host, self._host.engine_count())
            self.head_dtype = self._host.head_dtype()
            threading.Thread(target=self._forward_stop, name="ablate-host-stop",
                             daemon=True).start()
            self.sync_weights(model, version=0)
        except BaseException:
            self.close()
            raise

    @property
    def version(self) -> int:
        return self._host.version()

    def generate(self, prompts: list[list[int]], *, n: int, max_new_tokens: int,
                 temperature: float, top_p: float, seed: Optional[int]) -> Generation:
        return self._host.generate(prompts, n, max_new_tokens, temperature, top_p, seed)

    def stream(self) -> "HostedStream":
        return HostedStream(self)

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        """VLLMGenerator.sync_weights with the engines in the host: the host pauses them and
        starts their receive, this process broadcasts from the module (ZeRO-3: one gather per
        parameter, as every push), the host labels and resumes them."""
        if self._ends is None:
            self._ends = self._open_groups(model)
        specs = weight_specs(model, self.dtype)
        while (targets := self._host.push_begin(specs, preempt.requested())) is None:
            self._host.push_wait(0.5)  # an eval holds the one engine (pins.py)
        stop = PushStop(model)
        cut = True
        try:
            send_weights([self._ends[i] for i in targets], specs,
                         named_weights(model, self.dtype, stop))
            cut = stop.cut
        finally:
            self._host.push_end(version, cut)

    def _open_groups(self, model: torch.nn.Module) -> list[tuple]:
        on_gpu = next(model.parameters()).is_cuda
        backend = "nccl" if on_gpu else "gloo"
        device = torch.device("cuda", torch.cuda.current_device()) if on_gpu \
            else torch.device("cpu")
        timeout = group_timeout_s(self.config)
        # the update groups' rendezvous is this rank (the broadcast's source): on its own
        # node's loopback, or the address a generation node's engines reach this node by
        host = socket.gethostname() if self.remote else "127.0.0.1"
        ports = [_free_port() for _ in range(self.pins.n)]
        worlds = self._host.groups_open(host, ports, backend, timeout)
        ends = [(update_group(host, p, 0, w, backend, timeout), device)
                for p, w in zip(ports, worlds)]
        self._host.groups_done()
        return ends

    def _forward_stop(self) -> None:
        """Forward this process's stop signal once; renew a generation node's lease."""
        renewed, forwarded = time.monotonic(), False
        while not self._closed.wait(0.05):
            if self.remote and time.monotonic() - renewed > 5.0:
                with contextlib.suppress(Exception):  # a host already gone: the next call says
                    self._host.lease()
                renewed = time.monotonic()
            if not forwarded and preempt.requested():
                forwarded = True
                with contextlib.suppress(Exception):  # a host already gone
                    self._host.stop_signal()
                if not self.remote:
                    return

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            if getattr(self, "_host", None) is not None:
                self._host.close()
        finally:
            _stop_host(self._proc, self._manager)
            if self._where is not None:
                shutil.rmtree(self._where, ignore_errors=True)
            if self._tmp is not None:
                self._tmp.cleanup()
                self._tmp = None


class HostedStream:
    """trainer/generation/service.py's GenerationService over a stream in the host."""

    def __init__(self, gen: HostedGenerator) -> None:
        self.gen, self._host = gen, gen._host
        self.sid = self._host.stream_open()

    def start(self) -> None:  # the host started it
        pass

    def push_weights(self, weights: Weights, version: int) -> None:
        if isinstance(weights, dict):
            raise TypeError("the vLLM engine takes pushes from the trainer's module")
        self.gen.sync_weights(weights, version)

    def submit(self, request: Request) -> None:
        self._host.submit(self.sid, request)

    def results(self, timeout: Optional[float] = None) -> Iterator[Result]:
        while got := self._host.take(self.sid, timeout):
            yield from got

    def stop(self, timeout_s: float = 60.0) -> None:
        self._host.stream_stop(self.sid, timeout_s)


def make_vllm_generator(config: TrainConfig, model: torch.nn.Module, tokenizer):
    """Factory registered as rollout backend "vllm" (lazily, from trainer/torch_axes.py): the
    engines in a host process where `in_host` says so (above), else in this one: one engine
    (trainer/generation/vllm_engine.py) or data-parallel replicas of it
    (trainer/generation/replicas.py). It lives here, above all three, so that none of them
    imports a module that imports it."""
    from trainer.generation.replicas import ReplicaGenerator, replica_placements
    from trainer.generation.vllm_engine import VLLMGenerator

    from trainer.dist.binding import job_topology

    node = job_topology(config).fed_node(rank())
    if node is not None:  # node roles: the generation node this rank feeds (node_host.py)
        return HostedGenerator(config, model, tokenizer, [], node=node)
    replicas = len(current_binding(config).engines)
    if in_host(config):
        return HostedGenerator(config, model, tokenizer,
                               replica_placements(config, replicas) if replicas > 1 else [None])
    if replicas > 1:
        return ReplicaGenerator(config, model, tokenizer, replicas)
    return VLLMGenerator(config, model, tokenizer)

