"""Turn a SOURCE (study dir, table file, TensorBoard logs) into curves: variant, seed, compute, score.

    study results dir    ablate.analysis.gather; x/y default to gpu_hours / eval/pass_rate, or the
                         study.yaml `fit:` section; rows lacking x or y (non-eval lines) are left out
    .csv .jsonl .parquet long tables: columns variant, seed (optional), compute, score; a table
                         without a variant column (and no --by) is one curve named after the
                         file; rows with a blank compute or score cell are dropped and counted
    other tools' logs    W&B CSV exports, MLflow tracking dirs, TensorBoard dirs (verl, TRL,
                         ours), verl/TRL JSONL logs, HF trainer_state.json: ablate.readers;
                         score/compute auto-detected where unambiguous (Curves.notes says what
                         was picked), steps x --step-cost when only steps are logged; a trailing
                         "seed<N>" in a run's name becomes the seed
--by takes comma-separated columns whose values (joined by "/") name the variant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ablate import readers
from ablate.analysis.gather import cache_is_fresh, gather, is_study_dir, study_fit_defaults, write_cache
from ablate.errors import InputError
from trainer.rundir import GPU_HOURS, PASS_RATE

TABLE_SUFFIXES = (".csv", ".jsonl", ".parquet")


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
    duplicates: list[str] = field(default_factory=list)  # repeated steps found and resolved

    def variants(self) -> list[str]:
        return list(dict.fromkeys(self.frame["variant"]))


def load(source: str | Path, *, x: str | None = None, y: str | None = None,
         by: str | None = None, step_cost: float | None = None) -> Curves:
    """Read any supported SOURCE; raises InputError naming the file/column on bad input.

    `step_cost` (compute per step) applies to other tools' logs that only log steps."""
    p = Path(source)
    if not p.exists():
        raise InputError(f"{p}: no such file or directory; SOURCE is a study results dir, a "
                         ".csv/.jsonl/.parquet table, a W&B CSV export, an MLflow tracking dir, "
                         "a TensorBoard log dir, or a verl/TRL JSONL log")
    if step_cost is not None and (is_study_dir(p) or readers.detect(p) is None):
        raise InputError(f"{p}: --step-cost converts steps of other tools' logs (W&B, MLflow, "
                         "TensorBoard, JSONL) to compute; this source has its compute column")
    if is_study_dir(p):
        defaults = study_fit_defaults(p)
        x = x or defaults.get("x", GPU_HOURS)
        y = y or defaults.get("y", PASS_RATE)
        fresh = cache_is_fresh(p)
        df = gather(p, write_cache=False)
        tidy = _tidy(df, str(p), x, y, by or "variant", drop_missing=True)
        if not fresh:  # only once the input is known good: bad input writes nothing
            write_cache(p, df)
        return Curves(tidy, str(p), x, y, defaults, duplicates=tidy.attrs["duplicates"])
    if readers.detect(p) is not None:
        got = readers.read(p, x=x, y=y, step_cost=step_cost)
        tidy = _tidy(got.frame, str(p), got.x, got.y, by or "variant", drop_missing=True)
        return Curves(tidy, str(p), got.x, got.y, notes=got.notes,
                      duplicates=tidy.attrs["duplicates"])
    if p.is_file():
        if p.suffix not in TABLE_SUFFIXES:
            raise InputError(f"{p}: unsupported file type {p.suffix!r}; valid: "
                             + ", ".join(TABLE_SUFFIXES))
        df = _read_table(p)
        x, y = x or "compute", y or "score"
        if by is None and "variant" not in df.columns:
            df = df.assign(variant=p.stem)  # one curve: the file is the variant
        tidy = _tidy(df, str(p), x, y, by or "variant", drop_missing=True)
        return Curves(tidy, str(p), x, y, dropped=int(tidy.attrs.get("dropped", 0)),
                      duplicates=tidy.attrs["duplicates"])
    raise InputError(f"{p}: a directory with none of: variants.json (study results dir), "
                     "TensorBoard event files, an MLflow tracking dir, JSONL logs, "
                     "trainer_state.json")


def _read_table(p: Path) -> pd.DataFrame:
    try:
        if p.suffix == ".csv":
            return pd.read_csv(p)
        if p.suffix == ".jsonl":
            return pd.read_json(p, lines=True, dtype=False)
        return pd.read_parquet(p)
    except Exception as e:  # every reader raises its own types; all mean "unreadable file"
        raise InputError(f"{p}: cannot read as {p.suffix[1:]} ({str(e).splitlines()[0]})") from None


def _tidy(df: pd.DataFrame, src: str, x: str, y: str, by: str, *, drop_missing: bool) -> pd.DataFrame:
    by_cols = [c.strip() for c in by.split(",") if c.strip()]
    cols = list(df.columns)
    for role, c in [("--x", x), ("--y", y)] + [("--by", b) for b in by_cols]:
        if c not in df.columns:
            hint = "" if by_cols != ["variant"] or c != "variant" else " (or pass --by COLS)"
            raise InputError(f"{src}: no column {c!r} for {role}{hint}; columns: "
                             + ", ".join(map(str, cols[:30])))
    out = pd.DataFrame({
        "variant": df[by_cols].astype(str).agg("/".join, axis=1) if len(by_cols) > 1
        else df[by_cols[0]].astype(str),
        "seed": df["seed"] if "seed" in df.columns else 0,
    })
    for name, c in (("compute", x), ("score", y)):
        v = pd.to_numeric(df[c], errors="coerce")
        bad = v.isna() & df[c].notna()
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"{src}: column {c!r} row {i + 1} is not a number ({df[c].iloc[i]!r})")
        out[name] = v.astype(float)
    missing = out["compute"].isna() | out["score"].isna()
    if drop_missing:
        out = out[~missing]
    dropped = int(missing.sum()) if drop_missing else 0
    for name, c in (("compute", x), ("score", y)):
        v = out[name].to_numpy()
        bad = ~np.isfinite(v)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"{src}: column {c!r} has NaN/inf (variant "
                             f"{out['variant'].iloc[i]!r}, row {out.index[i] + 1}); all values "
                             "must be finite numbers")
    # The fit would reject these too, but without naming the file, column, variant or row.
    for name, c, bad, valid in (("compute", x, out["compute"] < 0, "compute must be >= 0"),
                                ("score", y, (out["score"] < 0) | (out["score"] > 1),
                                 "scores are pass rates in [0, 1]")):
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"{src}: column {c!r} row {out.index[i] + 1} is "
                             f"{out[name].iloc[i]:g} (variant {out['variant'].iloc[i]!r}); {valid}")
    out["seed"] = pd.to_numeric(out["seed"], errors="coerce").fillna(0).astype(int)
    if out.empty:
        raise InputError(f"{src}: no rows with both {x!r} and {y!r}")
    out, notes = dedupe(out)
    out = out.reset_index(drop=True)
    out.attrs["dropped"] = dropped
    out.attrs["duplicates"] = notes
    return out


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
        notes.append(f"dropped {n_same} duplicate row(s) repeating a step with the same score "
                     f"({where})")
    if n_diff:
        notes.append(f"{n_diff} step(s) logged more than once with different scores in one run "
                     f"({where}): kept the last logged value, as a resumed run's re-logged steps "
                     "replace the earlier ones; if these are separate runs, give them a seed "
                     "column")
    return frame[~dup], notes
