"""Launch the ranks of a CPU (gloo) multi-process job the way `srun` would: one process per
task with SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID / SLURM_JOB_NODELIST set, so
trainer/dist/groups.py's Slurm path builds the process group. Shared by test_deepspeed.py and
test_multirank.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The tiny proxy both multi-process tests train: small enough to warm up in seconds, warmed to a
# measured band so every rank and engine starts from one cached model.
TINY_PROXY = {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "intermediate_size": 128,
              "max_position_embeddings": 64, "warmup_target": 0.1, "warmup_band": 0.08,
              "warmup_batch_size": 32}
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(cache: Path, rank: int | None, world: int, port: int,
             nodes: int = 1) -> dict[str, str]:
    """This test process's environment minus any launcher variables, plus one Slurm task's
    (rank None: a plain single process). `nodes`: the tasks split over that many "nodes"
    (SLURM_NODEID / SLURM_LOCALID as srun sets them on a multi-node job; all on this host)."""
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS and not k.startswith("SLURM_")}
    env.update(ABLATE_CACHE=str(cache), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               DS_ACCELERATOR="cpu", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    if rank is not None:
        per = world // nodes
        env.update(SLURM_PROCID=str(rank), SLURM_NTASKS=str(world), SLURM_LOCALID=str(rank % per),
                   SLURM_NODEID=str(rank // per), SLURM_TASKS_PER_NODE=f"{per}(x{nodes})",
                   SLURM_JOB_NODELIST="127.0.0.1",
                   MASTER_PORT=str(port), SLURM_JOB_ID="4242")
    return env


def launch_ranks(script: Path, args: list[str], cache: Path, world: int = 2,
                 timeout: float = 300, python: str = sys.executable,
                 extra_env: dict[str, str] | None = None, nodes: int = 1) -> None:
    """Run `world` ranks of `script` to completion; fail with the log of a rank that failed.
    `python`: another interpreter (the vllm venv's) for the ranks."""
    port = free_port()
    ranks = list(range(world)) if world > 1 else [None]
    # Each rank's output goes to its own file, not a pipe: a pipe read one rank at a time
    # fills (64 KiB of vLLM or DeepSpeed start-up logs) and blocks the rank not being read,
    # while its peer waits for it in a collective.
    with tempfile.TemporaryDirectory(prefix="ablate-ranks-") as d:
        outs = [open(Path(d) / f"rank{i}.log", "w+") for i in range(len(ranks))]
        procs = [subprocess.Popen([python, str(script), *args], cwd=ROOT,
                                  env={**rank_env(cache, r, world, port, nodes),
                                       **(extra_env or {})},
                                  stdout=out, stderr=subprocess.STDOUT, text=True)
                 for r, out in zip(ranks, outs)]
        deadline = time.monotonic() + timeout
        try:
            for p in procs:
                p.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass  # the ranks still running are killed below and reported as failed
        finally:
            for p in procs:  # a rank left waiting in a collective after its peer died
                if p.poll() is None:
                    p.kill()
                    p.wait()
        logs = []
        for out in outs:
            out.seek(0)
            logs.append(out.read())
            out.close()
    failed = [f"--- rank {r} (exit {p.returncode}):\n{log[-4000:]}"
              for r, (p, log) in enumerate(zip(procs, logs)) if p.returncode != 0]
    assert not failed, f"{script.name} {' '.join(args)} failed:\n" + "\n".join(failed)


def session_cache() -> Path:
    """The test session's ABLATE_CACHE (tests/conftest.py: fresh per session, shared by
    pytest-xdist workers): the multi-rank tests' configs share one warmed proxy, so it is
    built once per session (under proxy_path's file lock) instead of once per module."""
    return Path(os.environ["ABLATE_CACHE"])


def warm_proxy(cache: Path, config_expr: str, python: str = sys.executable) -> None:
    """Build the warmed proxy of `config_expr` (a TrainConfig expression evaluated inside
    tests/) into `cache` once, before ranks start, so they only load it. `python`: the ranks'
    interpreter (its torch and transformers versions are part of the proxy's cache key). Its
    thread count is the run's (tests/run.sh: one a process, docs/testing.md)."""
    env = dict(os.environ, ABLATE_CACHE=str(cache), PYTHONPATH=str(ROOT))
    code = ("import sys; sys.path.insert(0, 'tests'); from trainer.policy import proxy_path; "
            f"print(proxy_path({config_expr}))")
    # A hang guard, not a speed check: the build (or the wait on tests/prewarm.py's lock for
    # it) took 169 s in CI beside the other worker and passed 300 s with three workers.
    subprocess.run([python, "-c", code], cwd=ROOT, env=env, check=True, timeout=900)


def leave_ranks() -> None:
    """A rank script's last line, after its results are written: a barrier (every rank is
    done), then exit without C++ teardown. CI once saw a rank abort at exit ("terminate called
    without an active exception": a thread of the gloo/DeepSpeed CPU backend still joinable
    when its owner was destroyed) after every check had passed. Close engines before this:
    os._exit runs no cleanup."""
    import torch.distributed as dist

    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def watch_pipeline(built: dict, shares: list, batches: list) -> None:
    """In a pipeline-mode rank script (vllm, several feeders): record this rank's own share of
    each step (its prompt ids, the versions its tokens were sampled with) in `shares`, each
    step's joined batch as every rank trains on it in `batches`, and the pipeline in
    built["source"]."""
    from trainer.generation import offpolicy
    from trainer.loop import train as loop

    orig_next, orig_batch = offpolicy.Pipeline.next, loop.next_batch

    def share(self, version):  # this rank's own part of the step (None: not a feeder)
        b = orig_next(self, version)
        built["source"] = self
        if b is not None:
            shares.append({"step": version, "prompts": b.prompt_ids,
                           "versions": sorted({v for vs in b.rollout.versions for v in vs})})
        return b

    def joined(source, step):  # the step's batch as every rank trains on it
        b = orig_batch(source, step)
        batches.append(b.prompt_ids)
        return b

    offpolicy.Pipeline.next, loop.next_batch = share, joined
