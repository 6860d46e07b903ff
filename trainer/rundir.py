"""The run directory, and the only code that reads or writes its files.

    <run_dir>/config.yaml     the resolved config the run trains (what ran, exactly)
    <run_dir>/status.json     {"state": RunState, "step", "updated", "pid", ...}
    <run_dir>/metrics.jsonl   one JSON object per evaluation point, append-only
    <run_dir>/identity.json   who the run is (study, variant, seed), handed in by whoever
                              launches it; absent for a lone run
    <run_dir>/trackers.json   where the trainer's trackers log the run (TensorBoard dir,
                              MLflow run, W&B run), written when they open; `ablate watch`
                              reads it to draw the forecast band beside the score there
    <run_dir>/rates.json      what the run's time plan assumed and what its steps measured
                              (trainer/plan/rates.py says its fields; trainer/loop/rates.py
                              writes it), read by the dry run and `ablate status`
    <run_dir>/checkpoint/     the latest resumable state

Why one owner: the trainer writes these files and the orchestrator, the analysis and the CLI
read them while the run may still be writing. With one reader there is one rule for a line
being written (below), one list of final states and one set of column names, instead of a
copy per reader that drifts.

Crash safety: every file that is rewritten goes through a temp file + fsync + rename, so a
kill -9 at any moment leaves either the old or the new version. metrics.jsonl is only appended
to, one row per write(2) on an O_APPEND descriptor, so concurrent writers never interleave;
on resume, lines past the checkpoint's step (and a torn last line) are dropped, so no step is
lost or duplicated.

The torn-line rule (every JSONL reader of the project): a writer killed mid-row leaves a
prefix of its line at the end of the file, and a reader may look while a row is being
written; so a LAST line that does not parse is ignored. Any other line that does not parse,
or is not a JSON object, is damage a reader must not skip silently: MetricsError naming the
file and line.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Optional

import yaml

CONFIG, STATUS, METRICS, IDENTITY = "config.yaml", "status.json", "metrics.jsonl", "identity.json"
TRACKERS = "trackers.json"
RATES = "rates.json"

# -- metrics.jsonl columns: declared here once, imported by every reader ----------------------
STEP, SAMPLES, TOKENS, FLOPS, GPU_HOURS = "step", "samples", "tokens", "flops", "gpu_hours"
PASS_RATE, TRAIN_PASS_RATE = "eval/pass_rate", "train/pass_rate"
REQUIRED_COLUMNS = (STEP, SAMPLES, TOKENS, FLOPS, GPU_HOURS, PASS_RATE)  # every row has these
COMPUTE_COLUMNS = (GPU_HOURS, FLOPS, SAMPLES, TOKENS, STEP)  # what a curve's x may be
SCORE_COLUMNS = (PASS_RATE, TRAIN_PASS_RATE)  # rates in [0, 1]: what the sigmoid fits
SECTIONS = ("eval/", "train/", "data/", "time/", "pipeline/", "flops/", "loss/")  # the rest

# The other columns the trainer writes (trainer/loop/train.py and the modules it delegates to), so
# that a reader, a plot or a test names them from here and a rename is one edit.
FLOPS_GENERATION, FLOPS_TRAINING = "flops/generation", "flops/training"
WALL_S, GENERATION_S = "time/wall_s", "time/generation_s"
ZERO_VARIANCE_DROPPED, ZERO_VARIANCE_DROPPED_FRAC = (
    "data/zero_variance_dropped", "data/zero_variance_dropped_frac")
NPR_RETIRED, EPOCH = "data/npr_retired", "data/epoch"
REWARD, TRUNCATION_RATE, INTERRUPT_RATE, RESPONSE_LEN = (
    "train/reward", "train/truncation_rate", "train/interrupt_rate", "train/response_len")
LOSS, ENTROPY, CLIP_FRAC, LOGPROB_MISMATCH = (
    "train/loss", "train/entropy", "train/clip_frac", "train/logprob_mismatch")
IS_RATIO_MEAN, IS_RATIO_MAX = "train/is_ratio_mean", "train/is_ratio_max"
GRAD_NORM, LR = "train/grad_norm", "train/lr"
PADDING_FRAC, MICRO_BATCHES, RANK_TOKENS_MAX_OVER_MEAN = (
    "train/padding_frac", "train/micro_batches", "train/rank_tokens_max_over_mean")
LAG_MEAN, LAG_MAX = "pipeline/lag_mean", "pipeline/lag_max"
STALENESS_MEAN, STALENESS_MAX = "pipeline/staleness_mean", "pipeline/staleness_max"  # old names
STALE_DROPPED, WAIT_S = "pipeline/stale_dropped", "pipeline/wait_s"
EVAL_S = "eval/seconds"  # the eval's own wall time (it runs beside training): on no compute axis
# Columns measured by the clock: the only ones a replayed seed may change (issue 35).
TIME_COLUMNS = frozenset({GPU_HOURS, WALL_S, GENERATION_S, WAIT_S, EVAL_S})


class RunState(str, enum.Enum):
    """status.json's "state". A str enum: it compares equal to, hashes, prints and dumps as
    its text, so status dicts read as plain JSON compare with it directly (enum.StrEnum
    without needing Python 3.11)."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    DIVERGED = "diverged"
    STOPPED = "stopped"  # by SIGINT/SIGTERM at a checkpoint: resumable, no failure

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


FINAL_STATES = frozenset({RunState.DONE, RunState.DIVERGED})  # a run in one never trains again


def is_final(state: Any) -> bool:
    """Whether `state` (a RunState, its text, or anything else) is one a run never leaves."""
    return state in FINAL_STATES


class MetricsError(ValueError):
    """A damaged line in a JSONL file; the message is `file:line: what is wrong`."""


def atomic_write(path: Path, text: str) -> None:
    """Temp file + fsync + rename: a kill -9 or a power loss leaves the old or the new file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


# -- config.yaml ---------------------------------------------------------------------------
def write_config(run_dir: Path, config: Any) -> None:
    """A config (a pydantic model, or its dump) as the run's config.yaml."""
    tree = config.model_dump(mode="json") if hasattr(config, "model_dump") else config
    atomic_write(Path(run_dir) / CONFIG, yaml.safe_dump(tree, sort_keys=False))


def read_config(run_dir: Path) -> dict:
    """The run's config.yaml as written (not validated); OSError when there is none,
    ValueError when it is not a mapping (an empty file must not train the defaults)."""
    path = Path(run_dir) / CONFIG
    tree = yaml.safe_load(path.read_text())
    if not isinstance(tree, dict):
        raise ValueError(f"{path}: expected a mapping of TrainConfig keys, got "
                         f"{type(tree).__name__}")
    return tree


# -- status.json ---------------------------------------------------------------------------
def write_status(run_dir: Path, state: RunState | str, step: int, **extra) -> None:
    """status.json = {"state", "step", "updated" (unix time), "pid", **extra}, durably: the
    project's one writer of it (the trainer every step, ablate's launchers for pending/failed).
    An unknown state is a ValueError: readers only ever see RunState values."""
    atomic_write(Path(run_dir) / STATUS, json.dumps(
        {"state": RunState(state).value, "step": step, "updated": time.time(),
         "pid": os.getpid(), **extra}))


def _json_dict(run_dir: Path, name: str) -> Optional[dict]:
    """One of the run's JSON files as a dict, or None when it is missing, unreadable or not
    an object: the one way every reader below treats a file a run has not written yet."""
    try:
        doc = json.loads((Path(run_dir) / name).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def read_status(run_dir: Path) -> dict:
    """The run's status.json, or {} when there is none yet (or it cannot be read)."""
    return _json_dict(run_dir, STATUS) or {}


def read_state(run_dir: Path) -> Optional[RunState]:
    """The run's state, or None when status.json is missing or holds no known state."""
    try:
        return RunState(read_status(run_dir).get("state"))
    except ValueError:
        return None


# -- identity.json -------------------------------------------------------------------------
def write_identity(run_dir: Path, *, study: str, variant: str, seed: int) -> None:
    """Who the run is, for the trainer's trackers (run name, group): written by the launcher
    so the trainer never reads the layout of whatever launched it."""
    atomic_write(Path(run_dir) / IDENTITY, json.dumps(
        {"study": study, "variant": variant, "seed": int(seed)}))


def read_identity(run_dir: Path) -> Optional[dict]:
    """The identity handed to the run ({"study", "variant", "seed"}), or None (a lone run)."""
    return _json_dict(run_dir, IDENTITY)


def write_trackers(run_dir: Path, where: dict[str, dict]) -> None:
    """Where each open tracker logs the run ({backend: {...}}: trainer/trackers.py says what
    each holds), so a reader finds the run there without the trainer's environment (an
    MLFLOW_TRACKING_URI, a W&B mode)."""
    atomic_write(Path(run_dir) / TRACKERS, json.dumps({"version": 1, "backends": where}))


def read_trackers(run_dir: Path) -> dict[str, dict]:
    """{backend: where} of the run's trackers ({} when it logged to none, or the file cannot be
    read)."""
    got = (_json_dict(run_dir, TRACKERS) or {}).get("backends")
    return {k: v for k, v in got.items() if isinstance(v, dict)} if isinstance(got, dict) else {}


def write_rates(run_dir: Path, doc: dict) -> None:
    """The run's planned and measured rates (trainer/plan/rates.py: the fields)."""
    atomic_write(Path(run_dir) / RATES, json.dumps(doc))


def read_rates(run_dir: Path) -> dict:
    """The run's rates.json, or {} when there is none yet (or it cannot be read)."""
    return _json_dict(run_dir, RATES) or {}


# -- metrics.jsonl -------------------------------------------------------------------------
def append_metrics(run_dir: Path, row: dict) -> None:
    """One row, durably, as one write(2) with O_APPEND: rows from concurrent writers never
    interleave or overwrite each other."""
    data = (json.dumps(row) + "\n").encode()
    fd = os.open(Path(run_dir) / METRICS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(f"{Path(run_dir) / METRICS}: short write")
        os.fsync(fd)
    finally:
        os.close(fd)


def _numbered_lines(data: bytes) -> list[tuple[int, bytes]]:
    return [(i, line) for i, line in enumerate(data.split(b"\n"), 1) if line.strip()]


def parse_jsonl(path: Path, data: bytes) -> list[tuple[int, dict]]:
    """(line number, object) of every line of `data` (the bytes of `path`), by the module's
    torn-line rule: a last line that does not parse is ignored, any other bad line raises."""
    lines = _numbered_lines(data)
    rows = []
    for k, (i, line) in enumerate(lines):
        try:
            obj = json.loads(line)
        except ValueError as e:  # UnicodeDecodeError included
            if k == len(lines) - 1:
                break  # torn: a writer killed mid-row, or one still writing
            why = f"{e.msg}: column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)
            raise MetricsError(f"{path}:{i}: not a JSON object ({why}); each line must be one "
                               "JSON object") from None
        if not isinstance(obj, dict):
            raise MetricsError(f"{path}:{i}: expected a JSON object, got {type(obj).__name__}")
        rows.append((i, obj))
    return rows


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) of every row of a JSONL file, by the torn-line rule."""
    return parse_jsonl(Path(path), Path(path).read_bytes())


def read_metrics(run_dir: Path) -> list[dict]:
    """Every row of the run's metrics.jsonl ([] when there is none yet); MetricsError on a
    damaged line that is not the last."""
    path = Path(run_dir) / METRICS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return [row for _, row in parse_jsonl(path, data)]


def complete_metrics_bytes(run_dir: Path) -> bytes:
    """The run's metrics.jsonl bytes without a torn last line, newline-terminated (b"" when
    there is none): for readers that parse many runs at once in bulk. Line numbers are the
    file's; the other lines are NOT checked here (parse_jsonl on these bytes does)."""
    path = Path(run_dir) / METRICS
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return b""
    data = data.rstrip()
    if not data:
        return b""
    start = data.rfind(b"\n") + 1
    try:
        json.loads(data[start:])
    except ValueError:
        return data[:start]  # the torn last line
    return data + b"\n"


def last_metrics_row(run_dir: Path) -> Optional[dict]:
    """The last complete row, or None."""
    rows = read_metrics(run_dir)
    return rows[-1] if rows else None


def truncate_metrics(run_dir: Path, max_step: int | None) -> None:
    """Keep only complete lines with step <= max_step (None: the run restarts from scratch)."""
    keep = [r for r in read_metrics(run_dir) if max_step is not None and r[STEP] <= max_step]
    atomic_write(Path(run_dir) / METRICS, "".join(json.dumps(r) + "\n" for r in keep))


# -- checkpoint/ ---------------------------------------------------------------------------
def checkpoint_dir(run_dir: Path) -> Path | None:
    """The latest complete checkpoint (recovering from a kill between the two renames)."""
    for name in ("checkpoint", "checkpoint.old"):
        d = Path(run_dir) / name
        if (d / "state.pt").exists():
            return d
    return None


def commit_checkpoint(run_dir: Path, tmp: Path) -> None:
    """Swap a fully written temp dir in as checkpoint/ (old kept until the new one is in)."""
    final, old = Path(run_dir) / "checkpoint", Path(run_dir) / "checkpoint.old"
    if not (final / "state.pt").exists() and (old / "state.pt").exists():
        shutil.rmtree(final, ignore_errors=True)  # killed between the renames last time
        os.rename(old, final)
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


EVAL_PROGRESS = "eval-progress.json"


def write_eval_progress(run_dir: Path, progress: dict[int, dict]) -> None:
    """Record, in the latest checkpoint, the chunks its pending evals have finished since it
    was written (step -> {chunk start: [correct, samples, version_min, version_max]}): a stop
    after that save keeps an eval's later chunks too. The next checkpoint replaces the dir,
    and with it this file (its own state.pt then holds the progress)."""
    ck = checkpoint_dir(run_dir)
    if ck is not None:
        doc = {str(s): {str(a): v for a, v in done.items()} for s, done in progress.items()}
        atomic_write(ck / EVAL_PROGRESS, json.dumps(doc))


def read_eval_progress(ck: Path) -> dict[int, dict[int, list]]:
    """The checkpoint's eval progress written after it (write_eval_progress); {} if none."""
    f = Path(ck) / EVAL_PROGRESS
    if not f.exists():
        return {}
    doc = json.loads(f.read_text())
    return {int(s): {int(a): v for a, v in done.items()} for s, done in doc.items()}
