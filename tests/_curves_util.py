"""Synthetic curves, study dirs and an in-process CLI runner for the curves tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

import synthetic as sy

TRUTHS = {
    "cispo": sy.Truth(A=0.66, B=1.6, C_mid=0.01, R0=0.10),
    "ppo": sy.Truth(A=0.55, B=1.6, C_mid=0.01, R0=0.10),
}


def curves_frame(seeds: int = 2, n_points: int = 60, seed: int = 0, truths=TRUTHS) -> pd.DataFrame:
    """Long table: variant, seed, compute (CPU-proxy device-hours, up to 0.05), score."""
    rng = np.random.default_rng(seed)
    rows = []
    for v, tr in truths.items():
        for s in range(seeds):
            c, y = sy.curve(tr, rng, c_max=0.05, n_points=n_points)
            rows += [{"variant": v, "seed": s, "compute": a, "score": b} for a, b in zip(c, y)]
    return pd.DataFrame(rows)


def write_study(root: Path, frame: pd.DataFrame, name: str = "toy") -> Path:
    """A study results dir in the run-dir layout (trainer/rundir.py, ablate/studydir.py), from a long table."""
    d = root / name
    d.mkdir(parents=True)
    variants = []
    for i, ((v, s), g) in enumerate(frame.groupby(["variant", "seed"], sort=False)):
        rid = f"run{i:04d}"
        variants.append({"run_id": rid, "name": v, "seed": int(s), "config": {}})
        (d / rid).mkdir()
        with open(d / rid / "metrics.jsonl", "w") as f:
            for j, (c, y) in enumerate(zip(g["compute"], g["score"])):
                f.write(json.dumps({"step": 10 * j, "samples": 64 * j, "tokens": 4096 * j,
                                    "flops": c * 1e15, "gpu_hours": c,
                                    "eval/pass_rate": y}) + "\n")
        (d / rid / "status.json").write_text(json.dumps({"state": "done"}))
    (d / "variants.json").write_text(json.dumps(variants))
    return d


def run_cli(args: list[str], capsys=None) -> tuple[int, str, str]:
    """`ablate ARGS` in process through the real entry point (tests/_cli.py); (exit code,
    stdout, stderr). `capsys` is accepted for the callers that pass it; nothing uses it."""
    from _cli import ablate

    r = ablate(*args, columns=None)  # a pipe with no COLUMNS: every line whole
    return r.returncode, r.stdout, r.stderr
