"""Curves that peak and fall, start late, or sit one folder off (issue 51 points 2, 3): made
with tests/synthetic.py (the truth written without ablate), written as a study dir or a CSV."""

from __future__ import annotations

import numpy as np
import pandas as pd

import synthetic as sy

HOT = sy.Truth(A=0.86, B=1.6, C_mid=0.006, R0=0.10)  # rises and stays
COLD = sy.Truth(A=0.84, B=1.6, C_mid=0.006, R0=0.10)  # rises to ~0.82, then falls
FALL_FROM = 0.75  # the cold runs fall over their last quarter of compute...
FALL_BY = 0.12  # ...by this much (the quickstart's 0.3 variant: 0.82 -> 0.70-0.75)


def sag_frame(seeds: int = 2, n_points: int = 48, seed: int = 0,
              late: bool = False) -> pd.DataFrame:
    """variant ("hot", "cold"), seed, compute (up to 0.05), score. `late`: every run's log starts
    at 15% of its compute (a trainer whose first evaluation comes after many steps)."""
    rng = np.random.default_rng(seed)
    rows = []
    for v, tr in (("hot", HOT), ("cold", COLD)):
        for s in range(seeds):
            c, y = sy.curve(tr, rng, c_max=0.05, n_points=n_points, prompts=800, samples=4)
            if v == "cold":
                frac = np.clip((c / c.max() - FALL_FROM) / (1 - FALL_FROM) * 3, 0, 1)
                y = np.clip(y - FALL_BY * frac, 0, 1)
            keep = c >= 0.15 * c.max() if late else np.ones(c.size, bool)
            rows += [{"variant": v, "seed": s, "compute": a, "score": b}
                     for a, b in zip(c[keep], y[keep])]
    return pd.DataFrame(rows)
