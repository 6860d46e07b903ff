"""Turn a SOURCE (study dir, table file, TensorBoard logs) into curves: variant, seed, compute, score.

    study results dir    ablate.analysis.gather; x/y default to gpu_hours / eval/pass_rate, or the
                         study.yaml `fit:` section; rows lacking x or y (non-eval lines) are left out
    .csv .jsonl .parquet long tables: columns variant, seed (optional), compute, score (else
                         found by the names a log's are: ablate/readers/columns.py); names
                         are text as written (a variant called None, NA, nan, null or N/A is
                         a variant, not a missing value); without a variant column a `run`,
                         `name` or `run_name` column names the variants (said on stderr), and
                         a table with none of them (and no --by) is one curve named after the
                         file; without a seed column a trailing "seed<N>" in a variant's name
                         is its seed (as for other tools' logs); rows with a blank compute or
                         score cell are dropped and counted
    other tools' logs    W&B CSV exports, MLflow tracking dirs, TensorBoard dirs (verl, TRL,
                         ours), verl/TRL JSONL logs, HF trainer_state.json: ablate.readers;
                         score/compute auto-detected where unambiguous (Curves.notes says what
                         was picked), steps x --step-cost when only steps are logged; a trailing
                         "seed<N>" in a run's name becomes the seed
--by takes comma-separated columns whose values (joined by "/") name the variant.

Scores are pass rates in [0, 1] (the sigmoid's A is a fraction of problems solved). A score on
another scale (TRL rewards in [-1, 1], percent) is mapped onto [0, 1] with `y_range=(lo, hi)`
(--y-range LO HI): score' = (score - lo) / (hi - lo); without it such a score is refused with the
--y-range that fits the data named.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ablate import readers
from ablate.analysis.gather import cache_is_fresh, gather, is_study_dir, study_fit, write_cache
from ablate.errors import InputError, NoDataYet
from ablate.number_text import count
from ablate.readers.columns import scale_hint, table_axes
from ablate.readers.common import split_seed
from trainer.rundir import METRICS, STATUS

TABLE_SUFFIXES = (".csv", ".jsonl", ".parquet")
# Columns that name runs in tables people export (W&B run tables, MLflow `runs` exports, hand
# made sheets), tried in this order when the table has no `variant` column and no --by.
RUN_COLUMNS = ("run", "name", "run_name")
# What pandas reads as missing by default; in a number column these still mean "no value".
NA_TEXT = frozenset({"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan",
                     "1.#IND", "1.#QNAN", "<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a",
                     "nan", "null"})


@dataclass
class Curves:
    """Tidy curves: one row per point, columns variant, seed, compute, score."""

    frame: pd.DataFrame
    source: str
    x: str
    y: str
    defaults: dict = field(default_factory=dict)  # fit window defaults from the source
    dropped: int = 0  # table rows left out for a blank compute or score cell
    notes: list[str] = field(default_factory=list)  # what a reader picked (for stderr)
    y_range: tuple[float, float] | None = None  # the score scale mapped onto [0, 1]
    duplicates: list[str] = field(default_factory=list)  # repeated steps found and resolved
    # how the rows were read as variants (a run column, seed<N> names, a mapped score scale):
    # said on stderr even with --json, since the answer depends on it
    readings: list[str] = field(default_factory=list)

    def variants(self) -> list[str]:
        return list(dict.fromkeys(self.frame["variant"]))


def load(source: str | Path, *, x: str | None = None, y: str | None = None,
         by: str | None = None, step_cost: float | None = None,
         y_range: tuple[float, float] | None = None) -> Curves:
    """Read any supported SOURCE; raises InputError naming the file/column on bad input.

    `step_cost` (compute per step) applies to other tools' logs that only log steps;
    `y_range` maps scores on that scale onto [0, 1] (see the module doc)."""
    y_range = check_y_range(y_range)
    p = Path(source)
    if not p.exists():
        raise InputError(f"{p}: no such file or directory; SOURCE is a study results dir, a "
                         ".csv/.jsonl/.parquet table, a W&B CSV export, an MLflow tracking dir, "
                         "a TensorBoard log dir, or a verl/TRL JSONL log")
    p = study_meant(p)
    if step_cost is not None and is_study_dir(p):
        raise InputError(f"{p}: --step-cost converts a log's steps to compute; a study dir "
                         "has its compute columns (pass --x gpu_hours or --x flops)")
    if is_study_dir(p):
        fit = study_fit(p)
        x, y = fit.axes(x, y)
        defaults = fit.given()
        fresh = cache_is_fresh(p)
        df = gather(p, write_cache=False)
        if df.empty:  # not bad input: its runs have not evaluated yet
            raise NoDataYet(f"{p}: no run has logged an evaluation yet (`ablate status {p}` "
                            "shows where they are)")
        tidy = _tidy(df, str(p), x, y, by or "variant", drop_missing=True, y_range=y_range,
                     seed_names=False)
        if not fresh:  # only once the input is known good: bad input writes nothing
            write_cache(p, df)
        return Curves(tidy, str(p), x, y, defaults, duplicates=tidy.attrs["duplicates"],
                      readings=tidy.attrs["notes"], y_range=y_range)
    if readers.detect(p) is not None:
        got = readers.read(p, x=x, y=y, step_cost=step_cost, by=by)  # by: its run column
        tidy = _tidy(got.frame, str(p), got.x, got.y, "variant", drop_missing=True,
                     y_range=y_range, seed_names=False)  # the reader split the seeds
        return Curves(tidy, str(p), got.x, got.y, notes=got.notes,
                      duplicates=tidy.attrs["duplicates"], readings=tidy.attrs["notes"],
                      y_range=y_range)
    if p.is_file():
        if p.suffix in (".yaml", ".yml"):  # a study file: its results are what compare reads
            raise InputError(f"{p}: a study file, not results; compare its results: "
                             f"results/{_study_name(p)}")
        if p.suffix not in TABLE_SUFFIXES:
            raise InputError(f"{p}: unsupported file type {p.suffix!r}; valid: "
                             + ", ".join(TABLE_SUFFIXES))
        by_cols = [c.strip() for c in (by or "").split(",") if c.strip()]
        df = _read_table(p, text_columns=["variant", *RUN_COLUMNS, *by_cols])
        notes = []
        if step_cost is not None:  # compute = step x cost, whatever else the table holds
            df, x = _step_compute(df, p, step_cost)
        # the file's own names, found as a log's are (ablate/readers/columns.py)
        x, y, by_cols, said = table_axes(df.columns, str(p), x=x, y=y, by=by_cols,
                                          skip=("variant", *RUN_COLUMNS))
        by = ",".join(by_cols) or None
        if by is None and "variant" not in df.columns:
            run_col = next((c for c in RUN_COLUMNS if c in df.columns), None)
            if run_col is not None:  # the runs are the variants (seeds pooled by name)
                by = run_col
                notes.append(f"{p}: no 'variant' column: each value of {run_col!r} is a "
                             f"variant (--by COLS to name variants by other columns)")
            else:
                text = [str(c) for c in df.columns if c not in (x, y, "seed")
                        and not pd.api.types.is_numeric_dtype(df[c])]
                df = df.assign(variant=p.stem)  # one curve: the file is the variant
                if text:
                    notes.append(f"{p}: no 'variant' column: all rows are one curve named "
                                 f"{p.stem!r}; if {', '.join(map(repr, text[:3]))} names runs, "
                                 f"pass --by {text[0]}")
        tidy = _tidy(df, str(p), x, y, by or "variant", drop_missing=True, y_range=y_range,
                     seed_names="seed" not in df.columns,
                     first_line={".csv": 2, ".jsonl": 1}.get(p.suffix))
        return Curves(tidy, str(p), x, y, dropped=int(tidy.attrs.get("dropped", 0)),
                      duplicates=tidy.attrs["duplicates"], readings=notes + tidy.attrs["notes"],
                      notes=said,
                      y_range=y_range)
    raise InputError(f"{p}: a directory with none of: variants.json (study results dir), "
                     "TensorBoard event files, an MLflow tracking dir, JSONL logs, "
                     "trainer_state.json")


def _study_name(p: Path) -> str:
    """The study's `name:` (its results folder's name), else the file's stem."""
    import yaml
    try:
        doc = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError):
        doc = None
    name = doc.get("name") if isinstance(doc, dict) else None
    return str(name) if isinstance(name, str) and name else p.stem


def study_meant(p: Path) -> Path:
    """The study dir a folder one level off means: a folder of study dirs, or a study's run
    folders (results/NAME/runs). Never read as a generic log (every run its own variant)."""
    if not p.is_dir() or is_study_dir(p):
        return p
    own_run = any((p / n).exists() for n in (METRICS, STATUS))
    if is_study_dir(p.parent) and not own_run:  # one run's dir stays that run
        return p.parent
    found = sorted(c for c in p.iterdir() if c.is_dir() and is_study_dir(c))
    if len(found) == 1:
        return found[0]
    if found:
        raise InputError(f"{p}: a folder of {len(found)} studies, not one study; did you mean "
                         + " or ".join(str(c) for c in found[:5]) + "?")
    return p


def _step_compute(df: pd.DataFrame, p: Path, step_cost: float) -> tuple[pd.DataFrame, str]:
    """The table with a compute column made from its step column (--step-cost)."""
    if not (step_cost > 0 and np.isfinite(step_cost)):
        raise InputError(f"--step-cost {step_cost}: must be a finite compute per step > 0")
    col = next((c for c in ("step", "Step", "_step", "global_step") if c in df.columns), None)
    if col is None:
        raise InputError(f"{p}: --step-cost needs a step column (step, Step, _step); columns: "
                         + ", ".join(map(str, df.columns[:20])))
    name = f"step x {step_cost:g}"
    return df.assign(**{name: pd.to_numeric(df[col], errors="coerce") * step_cost}), name


def _read_table(p: Path, text_columns: list[str]) -> pd.DataFrame:
    """The table with names as written: pandas would read a variant called None, NA, nan, null
    or N/A as a missing value (and "007" as 7), so CSV cells are read as text with only a blank
    cell missing, and `text_columns` (variant, run names, --by) as strings; number columns are
    converted later (`_tidy`), where NA_TEXT still means "no value"."""
    if p.stat().st_size == 0 or not p.read_bytes().strip():
        raise InputError(f"{p}: empty file (no rows); a table needs columns variant, compute, "
                         "score (or --x/--y) and one row per evaluation")
    try:
        if p.suffix == ".csv":
            header = pd.read_csv(p, nrows=0).columns
            return pd.read_csv(p, keep_default_na=False, na_values=[""],
                               dtype={c: str for c in header if c in text_columns})
        if p.suffix == ".jsonl":
            return pd.read_json(p, lines=True, dtype=False)
        return pd.read_parquet(p)
    except Exception as e:  # every reader raises its own types; all mean "unreadable file"
        raise InputError(f"{p}: cannot read as {p.suffix[1:]} ({str(e).splitlines()[0]})") from None


def check_y_range(y_range) -> tuple[float, float] | None:
    """(lo, hi) as floats, or an InputError naming what --y-range needs."""
    if y_range is None:
        return None
    try:
        lo, hi = (float(v) for v in y_range)
    except (TypeError, ValueError):
        raise InputError(f"--y-range {y_range!r}: give two numbers LO HI, e.g. --y-range -1 1"
                         ) from None
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise InputError(f"--y-range {lo:g} {hi:g}: needs finite LO < HI (e.g. -1 1 for "
                         "rewards, 0 100 for percent)")
    return lo, hi


def _where(first_line: int | None) -> Callable[[int], str]:
    """How an error names a row by its index in the file's frame: the line an editor shows
    (`first_line`: the line of row 0, 2 under a CSV header, 1 in JSONL), else "row N"."""
    if first_line is None:
        return lambda i: f"row {i + 1}"
    return lambda i: f"line {i + first_line}"


def _names(df: pd.DataFrame, by_cols: list[str], src: str, at: Callable[[int], str]) -> pd.Series:
    """The variant of each row: the --by columns' text joined by "/". A blank cell is an
    error (a row of no variant would be pooled into a variant called "nan")."""
    for c in by_cols:
        blank = df[c].isna()
        if blank.any():
            i = int(np.flatnonzero(blank.to_numpy())[0])
            raise InputError(f"{src}: column {c!r} {at(df.index[i])} is blank; every row needs "
                             "a variant name there")
    text = df[by_cols].astype(str)
    return text.agg("/".join, axis=1) if len(by_cols) > 1 else text[by_cols[0]]


def _check_columns(df: pd.DataFrame, src: str, x: str, y: str, by_cols: list[str]) -> None:
    for role, c in [("--x", x), ("--y", y)] + [("--by", b) for b in by_cols]:
        if c not in df.columns:
            hint = "" if by_cols != ["variant"] or c != "variant" else " (or pass --by COLS)"
            raise InputError(f"{src}: no column {c!r} for {role}{hint}; columns: "
                             + ", ".join(map(str, list(df.columns)[:30])))


def _numbers(df: pd.DataFrame, c: str, src: str, at: Callable[[int], str]) -> pd.Series:
    """Column `c` as floats: a blank (or NA_TEXT) cell is no value, any other text an error."""
    raw = df[c]
    if not pd.api.types.is_numeric_dtype(raw):  # text cells (CSV read as written)
        raw = raw.where(~raw.astype(str).str.strip().isin(NA_TEXT), None)
    v = pd.to_numeric(raw, errors="coerce")
    bad = v.isna() & raw.notna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(f"{src}: column {c!r} {at(df.index[i])} is not a number "
                         f"({df[c].iloc[i]!r})")
    return v.astype(float)


def _check_values(out: pd.DataFrame, src: str, x: str, y: str, at: Callable[[int], str],
                  y_range: tuple[float, float] | None) -> None:
    """Finite, compute >= 0, scores on their scale; the first bad row named. The fit would
    reject these too, but without naming the file, column, variant or row."""
    def first(bad) -> tuple[str, str]:
        i = int(np.flatnonzero(np.asarray(bad))[0])
        return at(out.index[i]), repr(out["variant"].iloc[i])

    for name, c in (("compute", x), ("score", y)):
        bad = ~np.isfinite(out[name].to_numpy())
        if bad.any():
            row, variant = first(bad)
            raise InputError(f"{src}: column {c!r} has NaN/inf (variant {variant}, {row}); "
                             "all values must be finite numbers")
    if y_range is not None:
        lo, hi = y_range
        outside = (out["score"] < lo) | (out["score"] > hi)
        if outside.any():
            row, variant = first(outside)
            raise InputError(f"{src}: column {y!r} {row} is {out['score'][outside].iloc[0]:g} "
                             f"(variant {variant}), outside --y-range {lo:g} {hi:g}")
        return
    scale = "" if out.empty else "; " + scale_hint(y, out["score"].to_numpy())
    for name, c, bad, valid in (("compute", x, out["compute"] < 0, "compute must be >= 0"),
                                ("score", y, (out["score"] < 0) | (out["score"] > 1),
                                 "scores are pass rates in [0, 1]" + scale)):
        if bad.any():
            row, variant = first(bad)
            raise InputError(f"{src}: column {c!r} {row} is {out[name][bad].iloc[0]:g} "
                             f"(variant {variant}); {valid}")


def _tidy(df: pd.DataFrame, src: str, x: str, y: str, by: str, *, drop_missing: bool,
          y_range: tuple[float, float] | None = None, seed_names: bool = False,
          first_line: int | None = None) -> pd.DataFrame:
    """The long frame (variant, seed, compute, score) the fits read, checked; errors name the
    row as `_where(first_line)` says."""
    by_cols = [c.strip() for c in by.split(",") if c.strip()]
    _check_columns(df, src, x, y, by_cols)
    at = _where(first_line)
    out = pd.DataFrame({"variant": _names(df, by_cols, src, at),
                        "seed": df["seed"] if "seed" in df.columns else 0})
    notes = []
    if seed_names:  # no seed column: "cispo-seed1" is seed 1 of cispo, as in other tools' logs
        out, note = split_seed_names(out, src)
        notes += [note] if note else []
    out["compute"], out["score"] = _numbers(df, x, src, at), _numbers(df, y, src, at)
    missing = out["compute"].isna() | out["score"].isna()
    if drop_missing:
        out = out[~missing]
    dropped = int(missing.sum()) if drop_missing else 0
    _check_values(out, src, x, y, at, y_range)
    if y_range is not None:
        lo, hi = y_range
        out["score"] = (out["score"] - lo) / (hi - lo)
        notes.append(f"{src}: scores mapped from [{lo:g}, {hi:g}] onto [0, 1] (--y-range): "
                     "A, predictions and targets are on that scale")
    out["seed"] = pd.to_numeric(out["seed"], errors="coerce").fillna(0).astype(int)
    if out.empty:
        raise InputError(f"{src}: no rows with both {x!r} and {y!r}")
    out, dup_notes = dedupe(out)
    out = out.reset_index(drop=True)
    out.attrs["dropped"] = dropped
    out.attrs["duplicates"] = dup_notes
    out.attrs["notes"] = notes
    return out


def split_seed_names(frame: pd.DataFrame, src: str) -> tuple[pd.DataFrame, str]:
    """Variants named "<v>-seed<N>" (also "/", "_", " ", "seed_N") become seed N of <v>, the
    rule other tools' logs follow (ablate.readers.common.split_seed), with a note saying which
    names were pooled ("" when none)."""
    pairs = [split_seed(v, fallback=v) for v in frame["variant"]]
    pooled = {v for (v, _), orig in zip(pairs, frame["variant"]) if v != orig}
    if not pooled:
        return frame, ""
    out = frame.assign(variant=[v for v, _ in pairs], seed=[s for _, s in pairs])
    counts = out[out["variant"].isin(pooled)].groupby("variant", sort=False)["seed"].nunique()
    said = ", ".join(f"{v} ({n} seed{'s' if n != 1 else ''})" for v, n in counts.items())
    return out, (f"{src}: a trailing seed<N> in a variant's name is its seed: pooled {said}; "
                 "give a seed column to keep names as written")


def dedupe(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """Rows repeating a (variant, seed, compute) resolved the way logs mean them, with notes.

    An identical repeat (same score) is a row written twice (an export that appended, a log
    read twice): dropped. A repeat with another score is what a run resumed from a checkpoint
    writes when it re-logs the steps after the checkpoint: the later row belongs to the
    trajectory that went on, so the last one is kept. Either way one seed's curve then has one
    point per compute, which the AR(1) noise model assumes (two evaluations at one step would
    read as a jump in the run's drift).
    """
    key = ["variant", "seed", "compute"]
    dup = frame.duplicated(key, keep="last")
    if not dup.any():
        return frame, []
    same = frame.duplicated(key + ["score"], keep="last")
    n_same, n_diff = int(same.sum()), int((dup & ~same).sum())
    first = frame[dup].iloc[0]
    where = (f"e.g. variant {first['variant']!r} seed {first['seed']} at compute "
             f"{first['compute']:g}")
    notes = []
    if n_same:
        notes.append(f"dropped {count(n_same, 'duplicate row')} repeating a step with the same "
                     f"score ({where})")
    if n_diff:
        notes.append(f"{count(n_diff, 'step')} logged more than once with different scores in one run "
                     f"({where}): kept the last logged value, as a resumed run's re-logged steps "
                     "replace the earlier ones; if these are separate runs, give them a seed "
                     "column or name the variants with --by COLS")
    return frame[~dup], notes
