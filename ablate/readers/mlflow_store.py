"""An MLflow tracking dir (file store), read without MLflow installed.

    mlruns/<experiment_id>/meta.yaml               name: <experiment name>
    mlruns/<experiment_id>/<run_id>/meta.yaml      run_name, lifecycle_stage
    mlruns/<experiment_id>/<run_id>/tags/<tag>     mlflow.runName, ablate.seed (ours)
    mlruns/<experiment_id>/<run_id>/metrics/<key>  lines "timestamp value step"; a key with "/"
                                                   is nested folders (metrics/eval/pass_rate)
SOURCE may be the mlruns dir or one experiment's dir. Deleted runs and experiments are left
out. Variants are run names (prefixed "<experiment>/" when several experiments hold runs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd
import yaml

from ablate.errors import InputError
from ablate.readers.common import Wide, wide_from_long


def _meta(d: Path) -> Optional[dict]:
    try:
        m = yaml.safe_load((d / "meta.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return m if isinstance(m, dict) else None


def _experiments(path: Path) -> list[Path]:
    if not path.is_dir():
        return []
    if (m := _meta(path)) and "experiment_id" in m and "run_id" not in m:
        return [path]
    return sorted(d for d in path.iterdir() if d.is_dir() and (m := _meta(d))
                  and "experiment_id" in m and "run_id" not in m)


def is_mlflow_dir(path: Path) -> bool:
    return bool(_experiments(path))


def _tag(run: Path, name: str) -> Optional[str]:
    try:
        return (run / "tags" / name).read_text().strip()
    except OSError:
        return None


def read_mlflow(path: Path) -> Wide:
    exps = [(e, _meta(e) or {}) for e in _experiments(path)]
    exps = [(e, m) for e, m in exps if m.get("lifecycle_stage", "active") != "deleted"]
    rows, with_runs = [], set()
    for exp, em in exps:
        for run in sorted(d for d in exp.iterdir() if (d / "metrics").is_dir()):
            rm = _meta(run) or {}
            if rm.get("lifecycle_stage", "active") == "deleted":
                continue
            name = _tag(run, "mlflow.runName") or rm.get("run_name") or run.name
            seed = _tag(run, "ablate.seed")
            if seed is not None:
                name = f"{name}/seed{seed}"
            for f in sorted(p for p in (run / "metrics").rglob("*") if p.is_file()):
                key = f.relative_to(run / "metrics").as_posix()
                for i, line in enumerate(f.read_text().splitlines(), 1):
                    parts = line.split()
                    if not parts:
                        continue
                    try:
                        _, value, step = (float(parts[0]), float(parts[1]),
                                          float(parts[2]) if len(parts) > 2 else 0.0)
                    except (ValueError, IndexError):
                        raise InputError(f"{f}:{i}: expected 'timestamp value step', got "
                                         f"{line!r}") from None
                    rows.append((str(em.get("name", exp.name)), name, step, key, value))
                with_runs.add(exp)
    if not rows:
        raise InputError(f"{path}: MLflow tracking dir has no runs with metrics")
    long = pd.DataFrame(rows, columns=["exp", "run", "step", "key", "value"])
    if len(with_runs) > 1:
        long["run"] = long["exp"] + "/" + long["run"]
    return Wide(wide_from_long(long.drop(columns="exp")))
