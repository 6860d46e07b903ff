"""Weight push from trainer rank 0 into a vLLM engine running in its own process(es).

Why a process group and not the RPC channel: vLLM's collective_rpc serializes its arguments
(tensors become nested lists, or a pickled blob, ~16 GB for an 8B model per push). Instead the
trainer and the engine's workers form one stateless process group (vLLM's own RLHF examples:
`init_weight_update_group` with StatelessProcessGroup / stateless_init_torch_distributed_
process_group; PipelineRL and verl do the same): NCCL when the weights live on GPUs, gloo on
CPU. A push announces (name, dtype, shape) of every parameter by RPC, then broadcasts them one
at a time while the workers feed each into vLLM's in-place `reload_weights` as it arrives.
The engine's own torch.distributed state is left alone. Both ends of the group wait up to the
job's collective timeout (engine.collective_timeout_minutes, trainer/dist/groups.py
group_timeout_s), not torch's default for the backend that vLLM falls back to when given none
(vllm/distributed/utils.py:617-622: 10 min for NCCL, 30 for gloo): a push that waits on a
slow step, or an engine that waits for the next push while the trainer evaluates, must not
end the engine sooner than the trainer's own collectives would end it.

A stop signal cuts a push between two parameters (PushStop): the trainer tells the workers the
push ends there (a flag broadcast before each parameter), so vLLM's reload finishes on what
came (its layerwise reload restores the layers that got nothing) and the engine stays alive,
holding weights of two versions. The generator then refuses to decode until a complete push
(trainer/generation/vllm_engine.py `torn`); the job is stopping anyway, and the resumed run
starts its engines afresh and pushes the checkpoint's weights whole before any rollout.

Also here: the one walk of the trainer's weights that every push uses (named_weights: ZeRO-3
shards gathered one parameter at a time, never a full copy), the other ranks' side of those
gathers (join_weight_gathers), and the same walk into files for an engine's first start.
"""

from __future__ import annotations

import socket
import threading
from datetime import timedelta
from pathlib import Path
from typing import Iterable, Iterator

import torch

from trainer.dist import preempt


def _worker_rank(worker) -> int:
    """Runs in each engine worker: its rank inside the engine (tensor-parallel rank)."""
    return int(worker.rank)


def update_group(host: str, port: int, rank: int, world: int, backend: str,
                 timeout_s: float):
    """One end's member of a weight-update group: a stateless group (the process's own
    torch.distributed state is left alone) whose rendezvous and collectives wait up to
    `timeout_s` (vllm/distributed/utils.py:571-581 `timeout`, passed to the store, 636-638,
    and to the gloo or NCCL group, 647-662)."""
    from vllm.distributed.utils import stateless_init_torch_distributed_process_group

    return stateless_init_torch_distributed_process_group(
        host, port, rank, world, backend, timeout=timedelta(seconds=timeout_s))


def _join_update_group(worker, host: str, port: int, world: int, backend: str,
                       timeout_s: float) -> None:
    """Runs in each engine worker: join the weight-update group as rank 1 + its own rank; the
    trainer's rank 0 is the group's rank 0 (vLLM's RLHF examples' `init_weight_update_group`),
    with the trainer's collective timeout."""
    worker._ablate_update_group = update_group(host, port, 1 + int(worker.rank), world,
                                               backend, timeout_s)


def _receive_weights(worker, specs: list[tuple[str, str, tuple[int, ...]]]) -> None:
    """Runs in each engine worker: receive the parameters the trainer broadcasts, one at a
    time in `specs` order, straight into vLLM's in-place reload (no file, no pickled blob)."""
    group = worker._ablate_update_group
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
        else torch.device("cpu")

    def stream():
        more = torch.zeros(1, dtype=torch.int32, device=device)
        for name, dtype, shape in specs:
            group.broadcast(more, 0).wait()
            if not more.item():  # the trainer cut the push (a stop signal): load what came
                return
            t = torch.empty(shape, dtype=getattr(torch, dtype), device=device)
            group.broadcast(t, 0).wait()
            yield name, t

    worker.reload_weights(weights_iterator=stream(), is_checkpoint_format=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rpc_in_thread(llm, fn, args: tuple) -> tuple[threading.Thread, list]:
    """Start llm.collective_rpc(fn, args) in a thread: the workers then block in a collective
    that this thread completes (broadcast), as ray's .remote() handle does in vLLM's examples."""
    errors: list[BaseException] = []

    def call() -> None:
        try:
            llm.collective_rpc(fn, args=args)
        except BaseException as e:  # re-raised by the caller after join
            errors.append(e)

    t = threading.Thread(target=call, name="ablate-weight-rpc", daemon=True)
    t.start()
    return t, errors


def _finish(t: threading.Thread, errors: list) -> None:
    t.join()
    if errors:
        raise RuntimeError("weight push into the vLLM engine failed") from errors[0]


class WeightBroadcast:
    """Trainer rank 0 -> every worker of a vLLM engine in its own process: a process group
    of 1 + workers (NCCL when the weights are on a GPU, gloo on CPU) over which each parameter
    is broadcast, one at a time, while the workers load them in place."""

    def __init__(self, llm, backend: str, timeout_s: float) -> None:
        """`timeout_s`: both ends' collective timeout (the job's: module doc)."""
        self.llm = llm
        # where this end's tensors live for the group: NCCL sends GPU tensors
        self.device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" \
            else torch.device("cpu")
        world = 1 + len(llm.collective_rpc(_worker_rank))
        host, port = "127.0.0.1", _free_port()  # the engine process runs on this node
        t, errors = _rpc_in_thread(llm, _join_update_group,
                                   (host, port, world, backend, timeout_s))
        self.group = update_group(host, port, 0, world, backend, timeout_s)
        _finish(t, errors)

    def push(self, specs: list[tuple[str, str, tuple[int, ...]]],
             weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Broadcast `weights` (consumed one at a time) that `specs` announced to the workers.
        Both come from one walk of the module's named_parameters (weight_specs,
        named_weights), so they match name for name."""
        push_to_all([self], specs, weights)


def push_to_all(casts: list[WeightBroadcast], specs: list[tuple[str, str, tuple[int, ...]]],
                weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """One push into several engines (data-parallel replicas, one group each): every
    parameter is produced once (under ZeRO-3, one gather, as the other ranks expect) and
    broadcast over each replica's group in turn, while all of them load. Each parameter is
    announced by a flag (1: one follows); `weights` ending early (a PushStop cut) is announced
    by a 0, and the workers load what came."""
    pending = [_rpc_in_thread(c.llm, _receive_weights, (specs,)) for c in casts]
    send_weights([(c.group, c.device) for c in casts], specs, weights)
    for t, errors in pending:
        _finish(t, errors)


def send_weights(ends: list, specs: list[tuple[str, str, tuple[int, ...]]],
                 weights: Iterable[tuple[str, torch.Tensor]]) -> None:
    """The trainer's side of a push: every parameter of `weights` broadcast over each
    (group, device) of `ends` in turn, announced by a 1 flag; a walk that ends early (a
    PushStop cut) is announced by a 0. The workers' side (_receive_weights) must be running."""
    sent = 0
    for _, w in weights:
        w = w.contiguous()
        for group, device in ends:
            group.broadcast(torch.ones(1, dtype=torch.int32, device=device), 0).wait()
            group.broadcast(w, 0).wait()
        sent += 1
    if sent < len(specs):
        for group, device in ends:
            group.broadcast(torch.zeros(1, dtype=torch.int32, device=device), 0).wait()


def weight_specs(model: torch.nn.Module, dtype: torch.dtype) -> list[tuple[str, str, tuple[int, ...]]]:
    """(HF name, dtype, full shape) of each parameter in `named_weights` order, read without
    gathering (ZeRO-3 keeps the full shape in ds_shape): what the receivers allocate."""
    return [(name.removeprefix("_orig_mod.").removeprefix("module."),
             str(dtype).removeprefix("torch."), tuple(getattr(p, "ds_shape", p.shape)))
            for name, p in model.named_parameters()]


def _zero3_full(p: torch.nn.Parameter) -> torch.Tensor:
    """A ZeRO-3 parameter's whole value, all-gathered from every rank's shard (`ds_tensor`).

    Why not deepspeed.zero.GatheredParameters: it skips a parameter that is already whole on
    this rank, and ranks can disagree on that (the tied LM head, persistent under ZeRO-3, was
    found whole on the joining ranks and partitioned on the pushing one after a step), so the
    ranks ran different numbers of all-gathers and the 4-rank rehearsal hung in the second
    push. Gathering the shards always is one collective per parameter on every rank."""
    import torch.distributed as dist

    group = getattr(p, "ds_process_group", None)
    shard = p.ds_tensor.detach()
    parts = [torch.empty_like(shard) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, shard, group=group)
    return torch.cat(parts)[:p.ds_numel].view(p.ds_shape)


class PushStop:
    """Where a stop signal cuts a push: asked before each parameter of the walk, on every
    rank that walks it (the pushing ranks' named_weights, the others' join_weight_gathers).

    Under ZeRO-3 every training rank joins each parameter's gather, so the ranks must cut at
    the same parameter: the flag is agreed there (trainer/dist/preempt.py agreed: one small
    all-reduce beside each parameter's all-gather). Otherwise only the pushing process walks
    the weights, and its own flag decides. `cut` tells the pusher the walk ended early."""

    def __init__(self, model: torch.nn.Module) -> None:
        first = next(model.parameters())
        self.partitioned = hasattr(first, "ds_id")  # the same answer on every rank
        self.device = first.device
        self.cut = False

    def now(self) -> bool:
        """True once the push must end before the next parameter."""
        if not self.cut:
            self.cut = preempt.agreed(self.device) if self.partitioned else preempt.requested()
        return self.cut


def named_weights(model: torch.nn.Module, dtype: torch.dtype,
                  stop: PushStop | None = None) -> Iterator[tuple[str, torch.Tensor]]:
    """(HF name, full tensor) for each parameter, gathering ZeRO-3 partitions one at a time:
    a push's walk, ending early where a stop signal cuts it (`stop`, or a PushStop of its
    own: under ZeRO-3 the joining ranks' walk asks before every parameter, so this one must)."""
    return _walk(model, dtype, stop or PushStop(model))


def _walk(model: torch.nn.Module, dtype: torch.dtype,
          stop: PushStop | None) -> Iterator[tuple[str, torch.Tensor]]:
    for name, p in model.named_parameters():
        if stop is not None and stop.now():
            return
        name = name.removeprefix("_orig_mod.").removeprefix("module.")
        full = _zero3_full(p) if hasattr(p, "ds_id") else p.detach()  # ds_id: ZeRO-3 partitioned
        yield name, full.to(dtype).clone()


def join_weight_gathers(model: torch.nn.Module) -> None:
    """On a rank that holds no generator: take part in the ZeRO-3 all-gathers that the feeding
    rank's `named_weights` runs for a push (each a collective over the training ranks), one
    parameter at a time in the same order, cut where the pushing rank's is (PushStop). A
    no-op for unpartitioned models."""
    stop = PushStop(model)
    if not stop.partitioned:
        return
    for _, p in model.named_parameters():
        if stop.now():  # asked before every parameter, as named_weights does
            return
        if hasattr(p, "ds_id"):
            _zero3_full(p)


def save_for_vllm(model: torch.nn.Module, path: Path) -> None:
    """config.json + model.safetensors of a model that exists only in memory. Not
    save_pretrained: under ZeRO-3 the module holds shards, so weights come from a push's
    walk (_walk), which gathers them. (Tokenizer files are not needed: token ids in/out.)"""
    from safetensors.torch import save_file

    model.config.save_pretrained(path)
    # not a push (nothing joins it) and never cut: an engine's first files must be whole
    save_file({n: t.contiguous() for n, t in _walk(model, torch.float32, None)},
              str(path / "model.safetensors"))
