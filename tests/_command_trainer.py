"""A stand-in trainer for `trainer: {kind: command}` tests: `--lr X --seed S --out DIR [--resume]`.

Writes `DIR/metrics.jsonl` rows {"step", "score"} rising as 1 - exp(-lr * step), one per step,
and `DIR/ckpt.json` after each step; `--resume` continues from ckpt.json (no step repeated).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--stop_at", type=int, default=None, help="exit 3 after this step (a crash)")
    a = p.parse_args()
    ckpt = a.out / "ckpt.json"
    start = json.loads(ckpt.read_text())["step"] if a.resume and ckpt.exists() else 0
    with open(a.out / "metrics.jsonl", "a") as f:
        for step in range(start + 1, a.steps + 1):
            f.write(json.dumps({"step": step, "score": 0.9 * (1 - math.exp(-a.lr * step))}) + "\n")
            f.flush()
            ckpt.write_text(json.dumps({"step": step}))
            if a.stop_at is not None and step == a.stop_at and not a.resume:
                raise SystemExit(3)


if __name__ == "__main__":
    main()
