"""`ablate watch --plot`: each run against its frozen forecast, one panel per run.

The frozen band (shaded, its median dashed) from the freeze on, the evaluations up to the freeze
(grey: what the forecast was fit to), the ones after it (coloured by side: inside, above, below),
and the departure (a vertical line at the compute where the k evaluations below began).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

MAX_PANELS = 12
COLORS = {"in": "tab:blue", "above": "tab:green", "below": "tab:red", "past": "tab:gray"}


def plot_watch(runs, judgements, path: str | Path, x: str = "compute",
               y: str = "score") -> Path | None:
    """Write the figure for the runs that have a forecast (None when none has)."""
    pairs = [(r, j) for r, j in zip(runs, judgements) if j.forecast is not None][:MAX_PANELS]
    if not pairs:
        return None
    import matplotlib  # local: heavy, needed only when a picture is drawn

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = min(3, len(pairs))
    rows = math.ceil(len(pairs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), dpi=110,
                             squeeze=False)
    for ax, (r, j) in zip(axes.ravel(), pairs):
        f = j.forecast
        g = np.asarray(f.grid)
        last = max(float(r.compute[-1]), f.frozen_at) * 1.05
        keep = g <= max(last, g[0] * 1.0001)
        ax.fill_between(g[keep], np.asarray(f.lo)[keep], np.asarray(f.hi)[keep], alpha=0.2,
                        color="tab:blue", lw=0, label=f"frozen {f.level:.0%} band")
        ax.plot(g[keep], np.asarray(f.mid)[keep], "--", color="tab:blue", lw=1)
        before = r.compute <= f.frozen_at
        ax.scatter(r.compute[before], r.score[before], s=8, color="0.55", label="fit to")
        for side, col in COLORS.items():
            pts = [p for p in j.points if p.side == side]
            if pts:
                ax.scatter([p.compute for p in pts], [p.score for p in pts], s=10, color=col,
                           label=side)
        if j.departed_at is not None:
            ax.axvline(j.departed_at, color="tab:red", lw=1.2, label="departed")
        ax.axvline(f.frozen_at, color="0.3", lw=0.8, ls=":")
        ax.set_title(f"{j.run[:40]}: {j.verdict}", fontsize=9)
        ax.set_xlabel(x, fontsize=8)
        ax.set_ylabel(y, fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, alpha=0.25)
        ax.legend(fontsize=6, loc="lower right")
    for ax in axes.ravel()[len(pairs):]:
        ax.set_visible(False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
