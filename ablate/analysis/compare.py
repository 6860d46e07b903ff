"""Rank variants by asymptote A, with the paper's rule for near-ties and P(beats baseline).

The paper treats +-0.02 as the run-to-run margin on A. Where two A's differ by less than the
margin, A cannot tell them apart, so both are refit with their shared (averaged) A and the one
with the larger B (reaches the shared ceiling with less compute) ranks higher.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ablate.analysis import rank_reversals
from ablate.analysis import A_MARGIN
from ablate.analysis.fit import N_BOOT
from ablate.analysis.fitters import refit_with_A
from ablate.analysis.variant_fits import GroupFit


@dataclass
class Ranked:
    group: GroupFit
    rank: int | None
    p_beats: float | None  # P(beats baseline); None for the baseline itself and failed fits
    note: str
    at_max: dict | None = None  # predicted score at the largest compute observed
    at_budget: dict | None = None  # predicted score at --budget
    disagreement: str | None = None  # where the predicted ordering contradicts the rank, why

    def as_dict(self) -> dict:
        return {**self.group.as_dict(), "rank": self.rank, "p_beats_baseline": self.p_beats,
                "note": self.note, "predicted_at_max_compute": self.at_max,
                "predicted_at_budget": self.at_budget, "disagreement": self.disagreement}


def p_greater(a: np.ndarray, b: np.ndarray) -> float:
    """P(X > Y) for independent X ~ draws a, Y ~ draws b (all pairs, via sorting)."""
    b = np.sort(np.asarray(b, float))
    return float(np.mean(np.searchsorted(b, np.asarray(a, float), side="left")) / b.size)


def _shared(g1: GroupFit, g2: GroupFit, *, n_boot: int):
    A = 0.5 * (g1.fit.A + g2.fit.A)
    return refit_with_A(g1.fit, A, n_boot=n_boot), refit_with_A(g2.fit, A, n_boot=n_boot), A


def tie_groups(fits: list[GroupFit], margin: float) -> list[list[GroupFit]]:
    """Fits sorted by A, cut into groups whose A's lie within `margin` of the group's top A.

    Anchoring each group at its highest A makes the ranking independent of input order: the
    pairwise test "within margin" is not transitive (0.50 ~ 0.515 ~ 0.53 but 0.50 !~ 0.53),
    so sorting with it as a comparator could rank the same variants differently.
    """
    groups: list[list[GroupFit]] = []
    for g in sorted(fits, key=lambda g: -g.fit.A):
        if groups and groups[-1][0].fit.A - g.fit.A < margin:
            groups[-1].append(g)
        else:
            groups.append([g])
    return groups


def rank_order(groups: list[GroupFit], margin: float = A_MARGIN) -> tuple[list[GroupFit], dict[str, str]]:
    """The paper's verdict: fitted variants in rank order, and the shared-A notes of tie groups.

    Variants rank by A; within a tie group (see `tie_groups`) all are refit at the group's
    shared (averaged) A and rank by B — for two variants exactly the paper's rule. `extrapolate`
    uses the same order, so the two commands can say where they disagree.
    """
    ok = [g for g in groups if g.fit is not None]
    order: list[GroupFit] = []
    notes: dict[str, str] = {}
    for tied in tie_groups(ok, margin):
        if len(tied) > 1:
            A = float(np.mean([g.fit.A for g in tied]))
            B = {g.variant: refit_with_A(g.fit, A, n_boot=0).B for g in tied}
            tied = sorted(tied, key=lambda g: -B[g.variant])
            for g in tied:
                others = ", ".join(f"{h.variant} {B[h.variant]:.2f}" for h in tied if h is not g)
                notes[g.variant] = (f"A within {margin:g} of {', '.join(h.variant for h in tied if h is not g)}"
                                    f": at shared A={A:.3f}, B {B[g.variant]:.2f} vs {others}")
        order += tied
    return order, notes


def compare(groups: list[GroupFit], *, baseline: str | None = None, margin: float = A_MARGIN,
            n_boot: int = N_BOOT, budget: float | None = None) -> list[Ranked]:
    """Ranked rows (failed fits last, unranked, with their reason).

    The rank is the paper's verdict (`rank_order`). Next to it each row carries what the
    variant is predicted to reach at the largest compute observed (any variant) and at
    `budget`, and a note wherever that predicted ordering contradicts the rank, with the reason
    (see ablate.analysis.rank_reversals).
    """
    ok = [g for g in groups if g.fit is not None]
    order, notes = rank_order(groups, margin)
    c_max = rank_reversals.largest_compute(groups)
    points = [("the largest compute observed", c_max)]
    if budget is not None:
        points.append(("the budget", budget))
    disagree: dict[str, list[str]] = {}
    for label, at in points:
        for v, note in rank_reversals.reversals(order, at, c_max, label).items():
            disagree.setdefault(v, []).append(note)
    base = next((g for g in ok if g.variant == baseline), None) if baseline else (ok[0] if ok else None)
    rows = []
    for i, g in enumerate(order, 1):
        p = None
        if base is not None and g is not base:
            if abs(g.fit.A - base.fit.A) >= margin:
                p = p_greater(g.fit.samples.get("A", [g.fit.A]), base.fit.samples.get("A", [base.fit.A]))
            else:
                f1, f2, _ = _shared(g, base, n_boot=n_boot)
                p = p_greater(f1.samples.get("B", [f1.B]), f2.samples.get("B", [f2.B]))
        rows.append(Ranked(g, i, p, notes.get(g.variant, ""),
                           rank_reversals.predicted(g.fit, c_max),
                           None if budget is None else rank_reversals.predicted(g.fit, budget),
                           " | ".join(disagree.get(g.variant, [])) or None))
    for g in groups:
        if g.fit is None:
            rows.append(Ranked(g, None, None, f"fit failed: {g.error}"))
    return rows
