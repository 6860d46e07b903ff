"""Gather speed (issue 3 target: 1,000 runs x 200 eval points into one frame in <= 2 s).

    python benchmarks/bench_gather.py [--runs 1000] [--points 200]

Writes a synthetic study results dir (variants.json, per-run metrics.jsonl with the trainer/rundir.py
keys plus a few training metrics, status.json) into a temp dir, then times
  cold   ablate.analysis.gather.gather() parsing every metrics.jsonl and writing metrics.parquet
  warm   the same call when the parquet cache is fresh (what `ablate compare` pays again)
Reports the median of 3 repetitions of each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from ablate.analysis.gather import CACHE, gather


def write(root: Path, runs: int, points: int) -> None:
    rng = np.random.default_rng(0)
    variants = []
    for r in range(runs):
        rid = f"{r:08x}"
        variants.append({"run_id": rid, "name": f"v{r % 10}", "seed": r // 10, "config": {}})
        d = root / rid
        d.mkdir()
        lines = []
        for i in range(points):
            gh = (i + 1) * 1e-4
            lines.append(json.dumps({
                "step": 10 * i, "samples": 1280 * i, "tokens": 81920 * i, "flops": gh * 3.1e15,
                "gpu_hours": gh, "eval/pass_rate": float(rng.uniform()),
                "train/loss": float(rng.normal()), "train/reward": float(rng.uniform()),
                "train/truncation_rate": 0.0, "time/wall_s": 3.6 * i}))
        (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        (d / "status.json").write_text('{"state": "done"}')
    (root / "variants.json").write_text(json.dumps(variants))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--points", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (CI)")
    a = ap.parse_args()
    if a.quick:
        a.runs, a.points = 20, 20
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "study"
        root.mkdir()
        write(root, a.runs, a.points)
        cold, warm = [], []
        for _ in range(3):
            (root / CACHE).unlink(missing_ok=True)
            t0 = time.perf_counter()
            df = gather(root)
            cold.append(time.perf_counter() - t0)
            assert len(df) == a.runs * a.points, len(df)
            os.utime(root / CACHE)  # make sure the cache is newer than the files just written
            t0 = time.perf_counter()
            df2 = gather(root)
            warm.append(time.perf_counter() - t0)
            assert len(df2) == len(df)
        print(json.dumps({"runs": a.runs, "points": a.points, "rows": len(df),
                          "columns": len(df.columns), "cold_s_median": statistics.median(cold),
                          "warm_s_median": statistics.median(warm)}, indent=1))


if __name__ == "__main__":
    main()
