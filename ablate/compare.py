"""Rank variants by asymptote A, with the paper's rule for near-ties and P(beats baseline).

The paper treats +-0.02 as the run-to-run margin on A. Where two A's differ by less than the
margin, A cannot tell them apart, so both are refit with their shared (averaged) A and the one
with the larger B (reaches the shared ceiling with less compute) ranks higher.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ablate.curves import N_BOOT, refit_with_A
from ablate.fitgroups import GroupFit


@dataclass
class Ranked:
    group: GroupFit
    rank: int | None
    p_beats: float | None  # P(beats baseline); None for the baseline itself and failed fits
    note: str

    def as_dict(self) -> dict:
        return {**self.group.as_dict(), "rank": self.rank, "p_beats_baseline": self.p_beats,
                "note": self.note}


def p_greater(a: np.ndarray, b: np.ndarray) -> float:
    """P(X > Y) for independent X ~ draws a, Y ~ draws b (all pairs, via sorting)."""
    b = np.sort(np.asarray(b, float))
    return float(np.mean(np.searchsorted(b, np.asarray(a, float), side="left")) / b.size)


def _shared(g1: GroupFit, g2: GroupFit, *, n_boot: int):
    A = 0.5 * (g1.fit.A + g2.fit.A)
    return refit_with_A(g1.fit, A, n_boot=n_boot), refit_with_A(g2.fit, A, n_boot=n_boot), A


def compare(groups: list[GroupFit], *, baseline: str | None = None, margin: float = 0.02,
            n_boot: int = N_BOOT) -> list[Ranked]:
    """Ranked rows (failed fits last, unranked, with their reason)."""
    ok = [g for g in groups if g.fit is not None]
    cache: dict[tuple[str, str], tuple[float, float, float]] = {}

    def shared_B(g1, g2):
        key = (g1.variant, g2.variant)
        if key not in cache:
            f1, f2, A = _shared(g1, g2, n_boot=0)
            cache[key] = (f1.B, f2.B, A)
            cache[(g2.variant, g1.variant)] = (f2.B, f1.B, A)
        return cache[key]

    def cmp(g1, g2):
        if abs(g1.fit.A - g2.fit.A) >= margin:
            return -1 if g1.fit.A > g2.fit.A else 1
        b1, b2, _ = shared_B(g1, g2)
        return -1 if b1 > b2 else (1 if b1 < b2 else 0)

    order = sorted(sorted(ok, key=lambda g: -g.fit.A), key=functools.cmp_to_key(cmp))
    base = next((g for g in ok if g.variant == baseline), None) if baseline else (ok[0] if ok else None)
    rows = []
    for i, g in enumerate(order, 1):
        notes, p = [], None
        near = [h for h in ok if h is not g and abs(h.fit.A - g.fit.A) < margin]
        for h in near:
            b1, b2, A = shared_B(g, h)
            notes.append(f"A within {margin:g} of {h.variant}: shared A={A:.3f}, B {b1:.2f} vs {b2:.2f}")
        if base is not None and g is not base:
            if abs(g.fit.A - base.fit.A) >= margin:
                p = p_greater(g.fit.samples.get("A", [g.fit.A]), base.fit.samples.get("A", [base.fit.A]))
            else:
                f1, f2, _ = _shared(g, base, n_boot=n_boot)
                p = p_greater(f1.samples.get("B", [f1.B]), f2.samples.get("B", [f2.B]))
        rows.append(Ranked(g, i, p, "; ".join(notes)))
    for g in groups:
        if g.fit is None:
            rows.append(Ranked(g, None, None, f"fit failed: {g.error}"))
    return rows
