"""Expand + validate a 10,000-variant study (target: <= 2 s on 2 cores).

    python benchmarks/bench_expand.py [--variants 10000] [--repeats 3]

Writes a grid study (3 axes x 2 seeds over recipes/scalerl.yaml) to a temp dir, then times
`load_study` + `expand` (every variant a validated TrainConfig with its hashed id), best of N.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ablate.studies.expand import expand
from ablate.studies.study import load_study

ROOT = Path(__file__).resolve().parents[1]


def make_study(folder: Path, n: int) -> Path:
    # 2 seeds x 5 aggregations/types x k lrs x 10 eps_max ~= n
    k = max(1, n // (2 * 10 * 10))
    lrs = ", ".join(f"{1e-7 * (i + 1):.3e}" for i in range(k))
    eps = ", ".join(str(2.0 + 0.5 * i) for i in range(10))
    text = f"""name: bench
base: {ROOT / 'recipes' / 'scalerl.yaml'}
axes:
  optim.lr: [{lrs}]
  loss.eps_max: [{eps}]
  loss.aggregation: [sample, prompt, token, sample, prompt, token, sample, prompt, token, token]
seeds: [0, 1]
"""
    # aggregation repeats collapse; use rollout.temperature for a true 10-value axis instead
    text = text.replace(
        "loss.aggregation: [sample, prompt, token, sample, prompt, token, sample, prompt, token, token]",
        "rollout.temperature: [" + ", ".join(str(0.5 + 0.1 * i) for i in range(10)) + "]",
    )
    path = folder / "bench.yaml"
    path.write_text(text)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--variants", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="a smoke run of a few seconds (CI)")
    args = ap.parse_args()
    if args.quick:
        args.variants, args.repeats = 200, 1
    with tempfile.TemporaryDirectory() as tmp:
        path = make_study(Path(tmp), args.variants)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            variants = expand(load_study(path))
            times.append(time.perf_counter() - t0)
    best = min(times)
    print(f"variants={len(variants)} best={best:.3f}s all={[round(t, 3) for t in times]} "
          f"target<=2s {'OK' if best <= 2 else 'MISSED'}")


if __name__ == "__main__":
    main()
