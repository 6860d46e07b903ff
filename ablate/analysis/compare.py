"""Rank variants by asymptote A, with the paper's rule for near-ties and P(beats baseline).

The paper treats +-0.02 as the run-to-run margin on A. Where two A's differ by less than the
margin, A cannot tell them apart, so both are refit with their shared (averaged) A and the one
with the larger B (reaches the shared ceiling with less compute) ranks higher.

The refits at a tie group's shared A are made once (`rank_order`, a `Tie` per group) and read
by everything that speaks of them: the table's note, P(beats baseline) inside the group, and
the answer sentence (ablate/analysis/answer.py), so the sentence cannot name another shared A
or another B than the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ablate.analysis import rank_reversals
from ablate.analysis import A_MARGIN
from ablate.analysis.fit import N_BOOT, Fit
from ablate.analysis.fitters import refit_with_A
from ablate.analysis.variant_fits import GroupFit


@dataclass
class Tie:
    """A tie group (`tie_groups`) refit at its shared A, once: `anchor` is the variant of its
    highest A (every member is within the margin of it), `refits` each member's fit with A held
    at `A`, in rank order (B descending)."""

    A: float
    anchor: str
    refits: dict[str, Fit]

    def B(self, variant: str) -> float:
        return self.refits[variant].B

    def note(self, variant: str, margin: float) -> str:
        """The table's note for one member: the others, the shared A and every B."""
        others = [v for v in self.refits if v != variant]
        return (f"A within {margin:g} of {', '.join(others)}: at shared A={self.A:.3f}, "
                f"B {self.B(variant):.2f} vs " + ", ".join(f"{v} {self.B(v):.2f}" for v in others))


@dataclass
class Ranked:
    group: GroupFit
    rank: int | None
    p_beats: float | None  # P(beats baseline); None for the baseline itself and failed fits
    note: str
    at_max: dict | None = None  # predicted score at the largest compute observed
    at_budget: dict | None = None  # predicted score at --budget
    disagreement: str | None = None  # where the predicted ordering contradicts the rank, why
    tie: Optional[Tie] = None  # its tie group's refits at the shared A (None: no tie)

    def as_dict(self) -> dict:
        return {**self.group.as_dict(), "rank": self.rank, "p_beats_baseline": self.p_beats,
                "note": self.note, "predicted_at_max_compute": self.at_max,
                "predicted_at_budget": self.at_budget, "disagreement": self.disagreement}


def p_greater(a: np.ndarray, b: np.ndarray) -> float:
    """P(X > Y) for independent X ~ draws a, Y ~ draws b (all pairs, via sorting)."""
    b = np.sort(np.asarray(b, float))
    return float(np.mean(np.searchsorted(b, np.asarray(a, float), side="left")) / b.size)


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


def rank_order(groups: list[GroupFit], margin: float = A_MARGIN, *, n_boot: int = 0,
               boot: Optional[str] = None) -> tuple[list[GroupFit], dict[str, Tie]]:
    """The paper's verdict: fitted variants in rank order, and each tied variant's `Tie`.

    Variants rank by A; within a tie group (see `tie_groups`) all are refit at the group's
    shared (averaged) A and rank by B — for two variants exactly the paper's rule. `extrapolate`
    uses the same order, so the two commands can say where they disagree. The group holding
    `boot` (the baseline) is refit with `n_boot` bootstrap draws (P(beats) reads them), the
    others as points (their notes and the sentence read B alone).
    """
    ok = [g for g in groups if g.fit is not None]
    order: list[GroupFit] = []
    ties: dict[str, Tie] = {}
    for tied in tie_groups(ok, margin):
        if len(tied) > 1:
            A = float(np.mean([g.fit.A for g in tied]))
            draws = n_boot if boot in {g.variant for g in tied} else 0
            refits = {g.variant: refit_with_A(g.fit, A, n_boot=draws) for g in tied}
            anchor = tied[0].variant
            tied = sorted(tied, key=lambda g: -refits[g.variant].B)
            tie = Tie(A, anchor, {g.variant: refits[g.variant] for g in tied})
            ties.update({g.variant: tie for g in tied})
        order += tied
    return order, ties


def compare(groups: list[GroupFit], *, baseline: str | None = None, margin: float = A_MARGIN,
            n_boot: int = N_BOOT, budget: float | None = None) -> list[Ranked]:
    """Ranked rows (failed fits last, unranked, with their reason).

    The rank is the paper's verdict (`rank_order`). Next to it each row carries what the
    variant is predicted to reach at the largest compute observed (any variant) and at
    `budget`, and a note wherever that predicted ordering contradicts the rank, with the reason
    (see ablate.analysis.rank_reversals).
    """
    ok = [g for g in groups if g.fit is not None]
    base = (next((g for g in ok if g.variant == baseline), None) if baseline
            else ok[0] if ok else None)
    order, ties = rank_order(groups, margin, n_boot=n_boot,
                             boot=base.variant if base is not None else None)
    c_max = rank_reversals.largest_compute(groups)
    points = [("the largest compute observed", c_max)]
    if budget is not None:
        points.append(("the budget", budget))
    disagree: dict[str, list[str]] = {}
    for label, at in points:
        for v, note in rank_reversals.reversals(order, at, c_max, label).items():
            disagree.setdefault(v, []).append(note)
    rows = []
    for i, g in enumerate(order, 1):
        p = None
        tie = ties.get(g.variant)
        if base is not None and g is not base:
            if tie is not None and tie is ties.get(base.variant):  # tied: B at the shared A
                f1, f2 = tie.refits[g.variant], tie.refits[base.variant]
                p = p_greater(f1.samples.get("B", [f1.B]), f2.samples.get("B", [f2.B]))
            else:  # ranked apart by A
                p = p_greater(g.fit.samples.get("A", [g.fit.A]),
                              base.fit.samples.get("A", [base.fit.A]))
        rows.append(Ranked(g, i, p, tie.note(g.variant, margin) if tie is not None else "",
                           rank_reversals.predicted(g.fit, c_max),
                           None if budget is None else rank_reversals.predicted(g.fit, budget),
                           " | ".join(disagree.get(g.variant, [])) or None, tie))
    for g in groups:
        if g.fit is None:
            rows.append(Ranked(g, None, None, f"fit failed: {g.error}"))
    return rows
