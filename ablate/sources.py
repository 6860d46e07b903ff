"""Turn a SOURCE (study dir, table file, TensorBoard logs) into curves: variant, seed, compute, score.

    study results dir    ablate.gather; x/y default to gpu_hours / eval/pass_rate, or the
                         study.yaml `fit:` section; rows lacking x or y (non-eval lines) are left out
    .csv .jsonl .parquet long tables: columns variant, seed (optional), compute, score
    TensorBoard dir      event files read with tbparse; each run dir is a curve (variant = its
                         path, a trailing "seed<N>" component becomes the seed); x is the event
                         step unless --x names a scalar tag
--by takes comma-separated columns whose values (joined by "/") name the variant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.errors import InputError
from ablate.gather import cache_is_fresh, gather, is_study_dir, study_fit_defaults, write_cache

TABLE_SUFFIXES = (".csv", ".jsonl", ".parquet")


@dataclass
class Curves:
    """Tidy curves: one row per point, columns variant, seed, compute, score."""

    frame: pd.DataFrame
    source: str
    x: str
    y: str
    defaults: dict = field(default_factory=dict)  # fit window defaults from the source

    def variants(self) -> list[str]:
        return list(dict.fromkeys(self.frame["variant"]))


def load(source: str | Path, *, x: str | None = None, y: str | None = None,
         by: str | None = None) -> Curves:
    """Read any supported SOURCE; raises InputError naming the file/column on bad input."""
    p = Path(source)
    if not p.exists():
        raise InputError(f"{p}: no such file or directory; SOURCE is a study results dir, a "
                         ".csv/.jsonl/.parquet table, or a TensorBoard log dir")
    if is_study_dir(p):
        defaults = study_fit_defaults(p)
        x = x or defaults.get("x", "gpu_hours")
        y = y or defaults.get("y", "eval/pass_rate")
        fresh = cache_is_fresh(p)
        df = gather(p, write_cache=False)
        tidy = _tidy(df, str(p), x, y, by or "variant", drop_missing=True)
        if not fresh:  # only once the input is known good: bad input writes nothing
            write_cache(p, df)
        return Curves(tidy, str(p), x, y, defaults)
    if p.is_file():
        if p.suffix not in TABLE_SUFFIXES:
            raise InputError(f"{p}: unsupported file type {p.suffix!r}; valid: "
                             + ", ".join(TABLE_SUFFIXES))
        df = _read_table(p)
        x, y = x or "compute", y or "score"
        return Curves(_tidy(df, str(p), x, y, by or "variant", drop_missing=False), str(p), x, y)
    if any(p.rglob("events.out.tfevents.*")):
        x, y = x or "step", y or "eval/pass_rate"
        return Curves(_tidy(_read_tensorboard(p, x, y), str(p), x, y, by or "variant",
                            drop_missing=True), str(p), x, y)
    raise InputError(f"{p}: a directory with neither variants.json (study results dir) nor "
                     "TensorBoard event files")


def _read_table(p: Path) -> pd.DataFrame:
    try:
        if p.suffix == ".csv":
            return pd.read_csv(p)
        if p.suffix == ".jsonl":
            return pd.read_json(p, lines=True, dtype=False)
        return pd.read_parquet(p)
    except Exception as e:  # every reader raises its own types; all mean "unreadable file"
        raise InputError(f"{p}: cannot read as {p.suffix[1:]} ({str(e).splitlines()[0]})") from None


def _read_tensorboard(p: Path, x: str, y: str) -> pd.DataFrame:
    from tbparse import SummaryReader

    df = SummaryReader(str(p), extra_columns={"dir_name"}).scalars
    if df.empty:
        raise InputError(f"{p}: TensorBoard logs contain no scalars")
    tags = sorted(df["tag"].unique())
    if y not in tags:
        raise InputError(f"{p}: no scalar tag {y!r} (pass --y); tags: {', '.join(tags[:20])}")
    if x != "step" and x not in tags:
        raise InputError(f"{p}: no scalar tag {x!r} (pass --x, or leave it out to use the "
                         f"step); tags: {', '.join(tags[:20])}")
    wide = df[df["tag"].isin({x, y})].pivot_table(index=["dir_name", "step"], columns="tag",
                                                   values="value", aggfunc="last").reset_index()
    if x == "step":
        wide[x] = wide["step"].astype(float)
    run = wide["dir_name"].fillna("").astype(str).replace("", p.name)
    m = run.str.extract(r"^(?:(.*)/)?seed[_-]?(\d+)$")
    wide["seed"] = pd.to_numeric(m[1], errors="coerce").fillna(0).astype(int)
    wide["variant"] = np.where(m[1].notna(), m[0].fillna(p.name), run)
    return wide


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
    return out.reset_index(drop=True)
