"""Per-run JSON logs of other trainers.

    verl file logger   (trainer.logger=[...,'file']) one JSONL per run, lines
                       {"step": N, "data": {"val-core/...": x, ...}} (newer verl adds
                       "elapsed_seconds")
    flat JSONL         lines {"step": N, "metric": x, ...}, e.g. a TRL/HF `on_log` callback
                       dumping its logs ("reward", "eval_reward", "num_tokens", ...); "global_step"
                       or "_step" also name the step
    trainer_state.json HF Trainer / TRL: {"log_history": [{"step": N, ...}, ...]}; in a
                       checkpoint-N folder the run is the folder above it

SOURCE is one file or a folder of them (each file a run, named by its path below SOURCE;
a file called metrics/log/train.jsonl is named by its folder; a line with a "run" or
"run_name" key is of the run it names).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator, Optional

import pandas as pd

from ablate.errors import InputError
from ablate.readers.common import Wide, wide_from_long
from trainer.rundir import MetricsError, read_jsonl

STEP_KEYS = ("step", "global_step", "_step")
# A line's own run name (one file holding several runs' lines): it beats the file's name; a
# file of many runs read as one curve would mix them (issue 51)
RUN_KEYS = ("run", "run_name")
_GENERIC = {"metrics", "log", "logs", "train", "training"}


def _first_object(path: Path) -> Optional[dict]:
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    obj = json.loads(line)
                    return obj if isinstance(obj, dict) else None
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return None


def _is_log_file(path: Path) -> bool:
    obj = _first_object(path)
    return bool(obj) and any(k in obj for k in STEP_KEYS) and "variant" not in obj


def _log_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if path.suffix == ".jsonl" and _is_log_file(path) else []
    if path.is_dir():
        return sorted(f for f in path.rglob("*.jsonl") if _is_log_file(f))
    return []


def is_run_log(path: Path) -> bool:
    return bool(_log_files(path))


def _run_name(f: Path, root: Path) -> str:
    rel = f.relative_to(root) if root.is_dir() else Path(f.name)
    name = rel.with_suffix("")
    if name.name in _GENERIC:
        # resolved: a log in the current folder (`ablate fit train.jsonl`) has parent "." (no name)
        name = name.parent if str(name.parent) != "." else Path(f.resolve().parent.name)
    return name.as_posix()


def _records(f: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line, object) of a log file by the project's one torn-line rule (trainer.rundir): a
    run still writing may end in a torn line, which is left out; a bad line elsewhere is an
    error naming the file and line."""
    try:
        yield from read_jsonl(f)
    except MetricsError as e:
        raise InputError(str(e)) from None


def _flatten(obj: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for k, v in obj.items():
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}{k}/")
        else:
            yield f"{prefix}{k}", v


def _rows(run: str, f: Path, entries: Iterator[tuple[int, dict[str, Any]]]) -> list[tuple]:
    rows = []
    for i, obj in entries:
        step_key = next((k for k in STEP_KEYS if k in obj), None)
        if step_key is None:
            raise InputError(f"{f}:{i}: no step (one of {', '.join(STEP_KEYS)})")
        try:
            step = float(obj[step_key])
        except (TypeError, ValueError):
            raise InputError(f"{f}:{i}: {step_key} = {obj[step_key]!r} is not a number") from None
        # verl nests the metrics under "data"; flat logs hold them at the top level
        data = obj["data"] if isinstance(obj.get("data"), dict) else {
            k: v for k, v in obj.items() if k not in STEP_KEYS}
        own = next((str(obj[k]) for k in RUN_KEYS if isinstance(obj.get(k), (str, int))
                    and not isinstance(obj.get(k), bool)), run)
        for k, v in _flatten(data):
            if k in RUN_KEYS or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue  # text, lists, None: not a curve
            rows.append((own, step, k, float(v)))
    return rows


def read_run_logs(path: Path) -> Wide:
    rows = []
    for f in _log_files(path):
        rows += _rows(_run_name(f, path), f, _records(f))
    if not rows:
        raise InputError(f"{path}: no numeric metrics in the JSONL log(s)")
    first = [_first_object(f) or {} for f in _log_files(path)]
    run_key = next((k for k in RUN_KEYS if any(k in o for o in first)), "run")
    return Wide(wide_from_long(pd.DataFrame(rows, columns=["run", "step", "key", "value"])),
                run_column=run_key)


# -- HF Trainer / TRL trainer_state.json ------------------------------------------------------
def _state_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path] if path.name == "trainer_state.json" else []
    if path.is_dir():
        return sorted(path.rglob("trainer_state.json"))
    return []


def is_hf_state(path: Path) -> bool:
    return bool(_state_files(path))


def _state_run(f: Path, root: Path) -> str:
    # resolved: `ablate fit trainer_state.json` in its own folder has parent "." (no name)
    d, root = f.resolve().parent, root.resolve()
    if re.fullmatch(r"checkpoint-\d+", d.name):
        d = d.parent
    if root.is_dir() and d != root and root in d.parents:
        return d.relative_to(root).as_posix()
    return d.name


def read_hf_state(path: Path) -> Wide:
    best: dict[str, tuple[int, Path, list]] = {}  # run -> the longest log_history seen
    for f in _state_files(path):
        try:
            hist = json.loads(f.read_text()).get("log_history")
        except (OSError, ValueError, AttributeError) as e:
            raise InputError(f"{f}: not a trainer_state.json ({e})") from None
        if not isinstance(hist, list):
            raise InputError(f"{f}: no \"log_history\" list")
        run = _state_run(f, path)
        if run not in best or len(hist) > best[run][0]:
            best[run] = (len(hist), f, hist)
    rows = []
    for run, (_, f, hist) in best.items():
        rows += _rows(run, f, ((i, h) for i, h in enumerate(hist, 1) if isinstance(h, dict)))
    if not rows:
        raise InputError(f"{path}: trainer_state.json log_history has no numeric metrics")
    return Wide(wide_from_long(pd.DataFrame(rows, columns=["run", "step", "key", "value"])))
