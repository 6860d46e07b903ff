"""Compare two runs' metrics.jsonl row by row, leaving out the columns that measure time.

A refactor that changes no behaviour leaves a fixed-seed run's metrics identical apart from
its wall-clock columns (gpu_hours is wall x devices). Exit 0 when identical, 1 with the first
differences otherwise.

    python benchmarks/behaviour/compare_metrics.py BEFORE/metrics.jsonl AFTER/metrics.jsonl
    python benchmarks/behaviour/compare_metrics.py BEFORE_DIR AFTER_DIR   # every case in both

The cases and how to run them before and after: benchmarks/behaviour/run_cases.sh.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from trainer.rundir import TIME_COLUMNS  # noqa: E402  (measured time: differs run to run)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def differences(a: Path, b: Path) -> list[str]:
    """Every difference between the two files' rows, time columns left out (empty: same)."""
    ra, rb = rows(a), rows(b)
    out = [] if len(ra) == len(rb) else [f"{len(ra)} rows vs {len(rb)}"]
    for i, (x, y) in enumerate(zip(ra, rb)):
        keys = (set(x) | set(y)) - TIME_COLUMNS
        for k in sorted(keys):
            if x.get(k, "<absent>") != y.get(k, "<absent>"):
                out.append(f"row {i} (step {x.get('step')}): {k}: {x.get(k, '<absent>')!r} "
                           f"vs {y.get(k, '<absent>')!r}")
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: compare_metrics.py BEFORE AFTER (two metrics.jsonl, or two folders of "
              "run dirs)", file=sys.stderr)
        return 2
    a, b = Path(argv[0]), Path(argv[1])
    pairs = ([(a, b)] if a.is_file() else
             [(d / "metrics.jsonl", b / d.name / "metrics.jsonl")
              for d in sorted(a.iterdir()) if (d / "metrics.jsonl").is_file()])
    bad = 0
    for x, y in pairs:
        if not y.is_file():
            print(f"{x.parent.name}: missing {y}")
            bad += 1
            continue
        diff = differences(x, y)
        n = len(rows(x))
        print(f"{x.parent.name}: {n} rows, "
              + ("identical (time columns aside)" if not diff else f"{len(diff)} differences"))
        for line in diff[:10]:
            print("   ", line)
        bad += bool(diff)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
