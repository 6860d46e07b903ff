"""Scaling-curve figure like the paper's: log-x compute, points, fit, dashed extrapolation."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ablate.analysis.variant_fits import GroupFit
from ablate.analysis.sources import Curves


def palette(variants: list[str]) -> dict[str, str]:
    """One colour per variant, in data order: the same variant has the same colour in every
    figure (the overview and each variant's own), so figures can be read side by side."""
    import matplotlib  # local: heavy (~0.5 s), needed only when a picture is drawn

    matplotlib.use("Agg")  # before pyplot: no display on compute nodes
    import matplotlib.pyplot as plt

    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    if len(variants) > len(cycle):
        cmap = plt.get_cmap("tab20")
        cycle = [matplotlib.colors.to_hex(cmap(i % 20)) for i in range(len(variants))]
    # hex, not whatever the style's cycle holds (RGB tuples in some): the report's CSS uses it
    return {v: matplotlib.colors.to_hex(cycle[i % len(cycle)]) for i, v in enumerate(variants)}


def plot_fits(curves: Curves, groups: list[GroupFit], path: str | Path, *,
              extend_to: float | None = None, colors: dict[str, str] | None = None) -> Path:
    """Write a PNG: per variant its points (hollow outside the fit window), the fitted curve
    over the data, the dashed extrapolation with its 95% predictive band (a run's score there:
    parameters, drift, plateau; ablate.analysis.intervals), and A as a dotted line.
    `colors`: variant -> colour (default: `palette` of `groups`)."""
    import matplotlib  # local: heavy (~0.5 s), needed only when a picture is drawn

    matplotlib.use("Agg")  # before pyplot: no display on compute nodes
    import matplotlib.pyplot as plt

    path = Path(path)
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    colors = colors or palette([g.variant for g in groups])
    df = curves.frame
    for g in groups:
        col = colors[g.variant]
        d = df[(df["variant"] == g.variant) & (df["compute"] > 0)]
        c, y = d["compute"].to_numpy(), d["score"].to_numpy()
        f = g.fit
        if f is None:
            ax.scatter(c, y, s=10, color=col, marker="x", label=f"{g.variant} (fit failed)")
            continue
        inwin = (c >= (f.min_compute or 0)) & (c <= (f.max_compute or np.inf))
        ax.scatter(c[inwin], y[inwin], s=10, color=col, alpha=0.7)
        ax.scatter(c[~inwin], y[~inwin], s=10, facecolors="none", edgecolors=col, alpha=0.7)
        c_lo, c_hi = c[inwin].min(), c[inwin].max()
        c_end = max(extend_to or 0.0, 4 * c.max())
        xs = np.geomspace(c_lo, c_hi, 100)
        xe = np.geomspace(c_hi, c_end, 100)
        ax.plot(xs, f.predict(xs), color=col, lw=1.8,
                label=f"{g.variant}: A={f.A:.3f}, B={f.B:.2f}")
        ax.plot(xe, f.predict(xe), color=col, lw=1.5, ls="--")
        if f.samples:
            ax.fill_between(xe, *f.prediction_band(xe), color=col, alpha=0.15, lw=0)
        ax.axhline(f.A, color=col, ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_xlabel(curves.x)
    ax.set_ylabel(curves.y)
    ax.set_title("Scaling curves (dotted: asymptote A; dashed: extrapolation, 95% predictive band)")
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
