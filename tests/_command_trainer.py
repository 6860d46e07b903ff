"""A stand-in trainer for `trainer: {kind: command}` tests: `--lr X --seed S --out DIR [--resume]`.

Writes `DIR/metrics.jsonl` rows {"step", "tokens" (100 a step), "score"} rising as top * (1 - exp(-lr * step)), one per step,
and `DIR/ckpt.json` after each step; `--resume` continues from ckpt.json (no step repeated).
SIGTERM (ablate's stop signal) ends it cleanly at the next step boundary, after that step's
checkpoint, with exit 0 and a line `stopped at step N` in DIR/stops.log.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import time
from pathlib import Path

STOP = {"asked": False}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--stop_at", type=int, default=None, help="exit 3 after this step (a crash)")
    p.add_argument("--step_s", type=float, default=0.0, help="seconds each step takes")
    p.add_argument("--top", type=float, default=0.9, help="the score's asymptote")
    a = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: STOP.update(asked=True))
    ckpt = a.out / "ckpt.json"
    start = json.loads(ckpt.read_text())["step"] if a.resume and ckpt.exists() else 0
    with open(a.out / "metrics.jsonl", "a") as f:
        for step in range(start + 1, a.steps + 1):
            time.sleep(a.step_s)
            score = a.top * (1 - math.exp(-a.lr * step))
            f.write(json.dumps({"step": step, "tokens": 100 * step, "score": score}) + "\n")
            f.flush()
            # whole or not at all (a reader polling it mid-write would see an empty file)
            (a.out / "ckpt.json.tmp").write_text(json.dumps({"step": step}))
            os.replace(a.out / "ckpt.json.tmp", ckpt)
            if a.stop_at is not None and step == a.stop_at and not a.resume:
                raise SystemExit(3)
            if STOP["asked"]:
                with open(a.out / "stops.log", "a") as log:
                    log.write(f"stopped at step {step}\n")
                return


if __name__ == "__main__":
    main()
