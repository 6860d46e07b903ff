"""How the published curves in this folder were extracted (kept for provenance; the CSVs are
committed, so the benchmark never needs the network). Needs a git mirror of the source:

    python benchmarks/published/extract.py GIT_DIR_OF_josancamon19/rl-scaling-laws

Source (commit pinned; see SOURCES.md):
  qwen3_gsm8k.csv        josancamon19/rl-scaling-laws results/export.csv: GRPO on GSM8K, Qwen3
                         0.6B-14B base, held-out GSM8K accuracy (1,319 prompts) vs training step.
Searched but not used: tztechno/tz_openr1's Qwen2.5-0.5B GRPO notebooks (per-step TRL logs,
200-400 points) log rewards/accuracy_reward = 0 at every step: those runs never learned.
"""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pandas as pd

JOSANCAMON_COMMIT = "cc6c4ee76f276f6ad1da50e84ad5feaa7f83b9ef"


def _show(repo: str, commit: str, path: str) -> str:
    return subprocess.run(["git", "--git-dir", repo, "show", f"{commit}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def qwen3(repo: str) -> pd.DataFrame:
    wide = pd.read_csv(io.StringIO(_show(repo, JOSANCAMON_COMMIT, "results/export.csv")))
    long = wide.melt(id_vars="Step", var_name="variant", value_name="score").dropna()
    long = long.rename(columns={"Step": "compute"})[["variant", "compute", "score"]]
    return long.sort_values(["variant", "compute"]).reset_index(drop=True)


if __name__ == "__main__":
    here = Path(__file__).parent
    qwen3(sys.argv[1]).to_csv(here / "qwen3_gsm8k.csv", index=False)
