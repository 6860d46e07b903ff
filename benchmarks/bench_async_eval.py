"""Eval beside training (issue 31 item 4): how long the training loop waits for evals.

Runs the CPU proxy with a heavy eval (every 2 steps: 64 prompts x 8 samples, about 8x a
step's generation) twice, in subprocesses: with this tree (eval launched, decoded beside
training) and, if given, another checkout (`--baseline DIR`, e.g. /work/main: eval in the
loop). Prints the run's wall time, the train loop's own wall (the gpu_hours axis, last row's
wall_s), the evals' own seconds and the step the trainer had reached when each line landed.

    python benchmarks/bench_async_eval.py [--baseline /work/main] [--json]
    python benchmarks/bench_async_eval.py --quick   # 2 steps, a small eval, unwarmed: a smoke run (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

RUN = r"""
import json, sys, threading, time
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from _trainer_util import config, tiny
import trainer
from trainer import rundir
quick = sys.argv[4:] == ["quick"]
c = tiny(budget={"steps": 2 if quick else 8},
         eval={"every_steps": 2, "num_prompts": 8 if quick else 64,
               "samples_per_prompt": 2 if quick else 8},
         checkpoint={"every_steps": 10000}, engine={"threads": 1})
if quick:
    sys.path.insert(0, str(Path(sys.argv[3]).parent / "benchmarks"))
    from _proxy import unwarmed
    unwarmed(c)
d = Path(sys.argv[1])
landed, stop = {}, threading.Event()
def watch():  # the trainer's step when each metrics line appeared
    while not stop.is_set():
        try:
            rows, st = rundir.read_metrics(d), rundir.read_status(d)
        except Exception:
            rows, st = [], {}
        for r in rows:
            landed.setdefault(r["step"], st.get("step"))
        time.sleep(0.02)
t = threading.Thread(target=watch, daemon=True); t.start()
t0 = time.perf_counter()
trainer.run(config(c), d)
wall = time.perf_counter() - t0
stop.set(); t.join()
rows = rundir.read_metrics(d)
print(json.dumps({"wall_s": wall, "loop_wall_s": rows[-1]["time/wall_s"],
                  "eval_s": sum(r.get("eval/seconds", 0) for r in rows),
                  "pass_rates": [r["eval/pass_rate"] for r in rows],
                  "trainer_step_when_line_landed": {str(k): v for k, v in landed.items()}}))
"""


def one(tree: Path, quick: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=str(tree), TOKENIZERS_PARALLELISM="false")
        out = subprocess.run([sys.executable, "-c", RUN, str(Path(tmp) / "run"), str(tree),
                              str(ROOT / "tests"), *(["quick"] if quick else [])], env=env, capture_output=True, text=True,
                             cwd=tree, timeout=1800)
        if out.returncode != 0:
            raise SystemExit(f"{tree}: {out.stderr[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, help="another checkout (eval in the loop)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="2 steps, a small eval, the proxy "
                    "unwarmed: a smoke run (CI)")
    a = ap.parse_args()
    res = {"this tree": one(ROOT, a.quick)}
    if a.baseline:
        res["baseline"] = one(a.baseline)
    if a.json:
        print(json.dumps(res))
        return
    print(f"{'tree':<10} {'wall s':>8} {'loop s':>8} {'eval s':>8}  trainer step when line landed")
    for k, r in res.items():
        print(f"{k:<10} {r['wall_s']:>8.1f} {r['loop_wall_s']:>8.1f} {r['eval_s']:>8.1f}  "
              f"{r['trainer_step_when_line_landed']}")


if __name__ == "__main__":
    main()
