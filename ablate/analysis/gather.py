"""Read a study results dir into one pandas frame (one row per evaluation point of every run).

    results/<study>/variants.json            [{"run_id", "name", "seed", "config"}, ...]
    results/<study>/<run_id>/metrics.jsonl   one JSON object per eval point (append-only)
    results/<study>/<run_id>/status.json     {"state": ...}
    results/<study>/metrics.parquet          the gathered frame, a cache (written atomically)

The cache is reused while it is newer than every metrics.jsonl / status.json / variants.json, so
`compare` on a finished study of 1,000 runs reads one file. A run's curve is read by the adapter
of its trainer (ablate/adapters): the built-in trainer's through trainer.rundir, its files' one
reader (a torn last line, a run still writing, is left out; a bad line elsewhere is an
InputError naming the file and line); another trainer's from its own log, with the study's fit
columns, never cached (the cache cannot see those files).
"""

from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.adapters import adapter_class, fit_columns
from ablate.errors import InputError
from ablate.study_record import StudyFit
from ablate.studydir import is_study_dir, read_record, read_variants  # the study dir's one reader
from trainer import rundir

CACHE = "metrics.parquet"
META_COLUMNS = ["variant", "seed", "run_id", "state"]


def _parse(path: Path, blob: bytes) -> list[dict]:
    """The rows of one run's metrics bytes; a damaged line is an InputError naming file:line."""
    try:
        return [row for _, row in rundir.parse_jsonl(path, blob)]
    except rundir.MetricsError as e:
        raise InputError(str(e)) from None


def _state(run_dir: Path) -> str:
    return str(rundir.read_status(run_dir).get("state", "unknown"))


def _fresh(cache: Path, study: Path, variants: list[dict]) -> bool:
    if not cache.is_file():
        return False
    t = cache.stat().st_mtime
    deps = [study / "variants.json"]
    for v in variants:
        deps += [study / v["run_id"] / rundir.METRICS, study / v["run_id"] / rundir.STATUS]
    if _trainer(variants).reads_own_log:
        return False  # another trainer's logs live in its own folders: always re-read
    return all(not d.exists() or d.stat().st_mtime < t for d in deps)


def cache_is_fresh(study: str | Path) -> bool:
    """True when results/<study>/metrics.parquet is newer than everything it was built from."""
    study = Path(study)
    return _fresh(study / CACHE, study, read_variants(study))


def write_cache(study: str | Path, frame: pd.DataFrame) -> None:
    _write_atomic(frame, Path(study) / CACHE)


def gather(study: str | Path, *, use_cache: bool = True, write_cache: bool = True) -> pd.DataFrame:
    """All runs' metrics as one frame: variant, seed, run_id, state, then every metric column."""
    study = Path(study)
    variants = read_variants(study)
    cache = study / CACHE
    if use_cache and _fresh(cache, study, variants):
        return pd.read_parquet(cache)

    blobs, counts = [], []
    trainer = _trainer(variants)
    fit = study_fit(study).given() if trainer.reads_own_log else {}
    for v in variants:
        blob = trainer.curve(study / v["run_id"], fit)
        blobs.append(blob)
        counts.append(blob.count(b"\n"))
    frame, counts = _frame_from_blobs(study, variants, blobs, counts)
    meta = pd.DataFrame({
        "variant": np.repeat([str(v["name"]) for v in variants], counts),
        "seed": np.repeat([int(v.get("seed", 0) or 0) for v in variants], counts),
        "run_id": np.repeat([str(v["run_id"]) for v in variants], counts),
        "state": np.repeat([_state(study / v["run_id"]) for v in variants], counts),
    })
    frame = pd.concat([meta, frame.drop(columns=[c for c in META_COLUMNS if c in frame],
                                        errors="ignore")], axis=1)
    if write_cache:
        _write_atomic(frame, cache)
    return frame


def _frame_from_blobs(study, variants, blobs, counts) -> tuple[pd.DataFrame, list[int]]:
    """(frame, rows per run). Parse all lines at once with pyarrow's C++ JSON reader (one block,
    so column types are inferred from every row); on any parse problem (or blank lines, which
    make the row count differ from the line count) fall back to a per-file, per-line parse
    that names the file and line."""
    import pyarrow as pa
    import pyarrow.json as pj

    allb = b"".join(blobs)
    if not allb:
        return pd.DataFrame(index=range(0)), counts
    try:
        table = pj.read_json(io.BytesIO(allb), read_options=pj.ReadOptions(block_size=len(allb) + 1))
        if table.num_rows == sum(counts):
            return table.to_pandas(), counts
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError):
        pass
    per_run = [_parse(study / v["run_id"] / rundir.METRICS, blob)
               for v, blob in zip(variants, blobs)]
    return pd.DataFrame.from_records([r for rows in per_run for r in rows]), [len(r) for r in per_run]


def _write_atomic(frame: pd.DataFrame, path: Path) -> None:
    """Write to a temp file beside `path` and rename: readers never see a half-written cache."""
    fd, tmp = tempfile.mkstemp(prefix=".metrics.", suffix=".parquet.tmp", dir=path.parent)
    os.close(fd)
    try:
        # mkstemp makes the file 0600; the cache is shared like the metrics it is built from
        # (lab-mates reading a study on shared storage): the usual 0666 less the umask
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


def _trainer(variants: list[dict]):
    """The adapter class of the study's trainer (its runs' config names it): how the curves
    are read."""
    return adapter_class(variants[0].get("config") if variants else None)


def study_fit(study: Path) -> StudyFit:
    """The study's fit (columns and window) as its record holds it (ablate/studydir.py
    `read_record`: resolved at submit by its trainer's adapter); a study dir written before
    the record has its fit as written, resolved here by the same rule (`fit_columns`)."""
    record = read_record(Path(study))
    if record.fit_resolved:
        return record.fit
    return fit_columns(record.trainer, record.fit.given())
