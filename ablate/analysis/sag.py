"""What a run's own evaluations say without a fit: its peak, a fall from it, where it reached a
score. The one sag rule that `watch`, `compare`, the report, `status` and `extrapolate` apply
(issue 51: a run that rose to 0.83 and fell to 0.70 read "ahead" in watch and `ok` in compare).

A run has FALLEN when the mean of its last W evaluations is FALL or more below the best earlier
mean of W consecutive evaluations (its peak), and that fall is also Z standard errors of the
difference of two such means (the evaluation noise read from the run's own evaluations, each
against its neighbours): one lucky evaluation is no peak, and on a noisy eval set the best of
many means sits well above the level by chance (with noise sd 0.05 a fall of 0.1 is 2.4 such
errors). The peak is later than the first W evaluations: a score that only declines from its
start has no peak to fall from (`watch` calls it falling; its fit is refused).
A run REACHED a score where the mean of W consecutive evaluations first got to it.
Pure numbers in, plain records out: no numpy import at a command's start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

FALL = 0.1  # a fall from the run's own peak that is a sag (issue 51: 0.83 -> 0.70 read ahead)
W = 3  # evaluations averaged on both sides of a fall, and for "reached"
Z = 4.0  # the fall in standard errors of a difference of two W-means, at least


@dataclass(frozen=True)
class Fall:
    """A run's fall from its peak: means of W evaluations."""

    peak: float
    peak_at: float  # compute of the last evaluation of the peak's W
    latest: float

    def text(self) -> str:
        from ablate.number_text import compute

        return (f"fell {self.peak - self.latest:.2f} from its peak: the mean of its last {W} "
                f"evaluations {self.latest:.3f}, the best such mean {self.peak:.3f} at compute "
                f"{compute(self.peak_at)}")

    def short(self) -> str:
        """"fell 0.83→0.70": the watch column's cell."""
        return f"fell {self.peak:.2f}→{self.latest:.2f}"

    def as_json(self) -> dict:
        return {"peak": self.peak, "peak_at": self.peak_at, "latest": self.latest}


def _sorted(c, y):
    import numpy as np

    c, y = np.asarray(c, float), np.asarray(y, float)
    order = np.argsort(c, kind="stable")
    return c[order], y[order]


def noise_sd(y) -> float:
    """One evaluation's noise sd, robustly from each evaluation's distance to the mean of its
    two neighbours (variance 1.5 sd^2 for white noise): a rise's slope cancels out, and a
    collapse's one big step barely moves the median."""
    import numpy as np

    y = np.asarray(y, float)
    if y.size < 3:
        return 0.0
    e = np.abs(y[1:-1] - 0.5 * (y[:-2] + y[2:]))
    return float(1.4826 * np.median(e) / math.sqrt(1.5))


def fall_from_peak(c, y) -> Optional[Fall]:
    """The run's fall from its peak (see the module doc), or None: it has not fallen (or has
    fewer than 2 W evaluations)."""
    import numpy as np

    c, y = _sorted(c, y)
    if y.size < 2 * W:
        return None
    means = np.convolve(y, np.ones(W) / W, mode="valid")  # means[i]: y[i:i+W]
    i = int(np.argmax(means[:-1]))
    if i == 0:  # no rise to a peak: a score falling from its first evaluation ("falling")
        return None
    drop = float(means[i] - means[-1])
    if drop < max(FALL, Z * noise_sd(y) * math.sqrt(2 / W)):
        return None
    return Fall(float(means[i]), float(c[i + W - 1]), float(means[-1]))


def reached(c, y, target: float) -> Optional[tuple[float, float]]:
    """(compute, mean) where the mean of W consecutive evaluations first reached `target`
    (the compute of the last of them); None when it never did."""
    import numpy as np

    c, y = _sorted(c, y)
    if y.size < W:
        return None
    means = np.convolve(y, np.ones(W) / W, mode="valid")
    hit = np.flatnonzero(means >= target)
    return None if not hit.size else (float(c[hit[0] + W - 1]), float(means[hit[0]]))


def runs_of(frame):
    """((variant, seed), compute, score) of each run of a curves frame, in data order."""
    for (v, s), g in frame.groupby(["variant", "seed"], sort=False):
        yield (str(v), int(s)), g["compute"].to_numpy(float), g["score"].to_numpy(float)


def falls(frame) -> dict[str, list[tuple[int, Fall]]]:
    """Each variant's runs that fell from their peak: {variant: [(seed, Fall)]}."""
    out: dict[str, list[tuple[int, Fall]]] = {}
    for (v, s), c, y in runs_of(frame):
        f = fall_from_peak(c, y)
        if f is not None:
            out.setdefault(v, []).append((s, f))
    return {v: sorted(got, key=lambda sf: sf[0]) for v, got in out.items()}  # by seed
