"""The one-sentence answer printed above every ranking (compare, report, the end of a sweep).

It names the two variants that decide (the top one and the baseline, or the baseline and the
runner-up when the baseline leads), what the paper's rule says about them (A differs by more
than the margin, or A ties and B at the shared A does or does not differ), the baseline and the
window. It must stay true for adaptive studies: a variant stopped at an early stage, or a lone
survivor that was not scaled (`scale_winner: false`), is said to be at that fraction of the
final budget, never "reached the final budget".

Variant names are the table's: shortened to the values that differ (`ablate.analysis.labels.shorten`),
with the axis named once at the start, e.g. "off_policy.mode: pipeline and ppo_off_policy tie on
A ...", so the sentence and the table below it name each variant the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ablate.analysis.labels import differing_axes, shorten
from ablate.analysis.pipeline import Analysis, analyze
from ablate.errors import InputError
from ablate.number_text import compute, count, interval, number

SURE = 0.95  # P(beats) at or beyond this (or 1 - this) reads as a difference, else "no difference"


@dataclass
class Names:
    """How the sentence names variants: `prefix` ("axis: " once, or "" when labels are shown as
    written) and full label -> the table's short label. A name not in the table (a stopped
    variant the rows do not hold) stays as written."""

    prefix: str = ""
    short: dict[str, str] = field(default_factory=dict)

    def __call__(self, variant: Optional[str]) -> str:
        if variant is None:
            return "None"  # as the sentence printed it before names were shortened
        v = self.short.get(variant, variant)
        return f"({v})" if ", " in v and v != variant else v  # a multi-axis value tuple


def names_for(labels: list[str]) -> Names:
    """The table's short labels (`ablate.analysis.labels.shorten` over the same rows) and the axes
    that differ, named once: "off_policy.mode: " for one axis, "(optim.lr, loss.type): " for
    several (their values then read as "(1e-4, cispo)")."""
    labels = list(dict.fromkeys(labels))
    _, short = shorten(labels)
    if all(short[v] == v for v in labels):
        return Names("", short)
    axes = differing_axes(labels)
    return Names(axes[0] + ": " if len(axes) == 1 else f"({', '.join(axes)}): ", short)


def _ci(fit, name: str) -> str:
    lo, hi = fit.ci.get(name, (None, None))
    return "" if lo is None else f" {interval(lo, hi)}"


def _num(fit, name: str) -> str:
    """A fitted parameter at its interval's precision (ablate/number_text.py)."""
    return number(getattr(fit, name), fit.ci.get(name))


def _pair(lead, follow, p_lead: Optional[float], margin: float, name: Names) -> str:
    """The clause for two fitted rows: `p_lead` = P(lead beats follow) by the paper's rule,
    said with both names: a bare "P(beats) 1.00" next to "(baseline X)" read as X beating
    itself when X leads. Two rows of one tie group are said with the group's refits at its
    shared A (the rows' `tie`, made once by ablate.analysis.compare): the table's numbers."""
    a, b = lead.group.fit, follow.group.fit
    la, fb = name(lead.group.variant), name(follow.group.variant)
    p = "" if p_lead is None else f"P({la} beats {fb}) {p_lead:.2f}"
    tie = lead.tie if lead.tie is not None and lead.tie is follow.tie else None
    if tie is None:
        sure = p_lead is None or p_lead >= SURE
        if abs(a.A - b.A) >= margin:
            why = f"more than the {margin:g} margin"
        else:  # within the margin of each other, but not of the top of the lead's tie group
            top = lead.tie.anchor if lead.tie is not None else lead.group.variant
            why = (f"within {margin:g} of each other, but {fb} is not within {margin:g} of "
                   f"{name(top)}, the highest A of {la}'s tie group")
        return (f"{la} has the higher ceiling: A {_num(a, 'A')} vs {_num(b, 'A')} for {fb}, {why}"
                + (f" ({p})" if sure and p else f", but the intervals overlap ({p})" if p else ""))
    shared, ba, bb = tie.A, tie.B(lead.group.variant), tie.B(follow.group.variant)
    # the refit values at the precision of the fits' own intervals (the shared A at the first's)
    head = (f"{la} and {fb} tie on A ({_num(a, 'A')} vs {_num(b, 'A')}, within {margin:g}); at the "
            f"shared A {number(shared, a.ci.get('A'))}, B {number(ba, a.ci.get('B'))} vs "
            f"{number(bb, b.ci.get('B'))}: ")
    if p_lead is not None and p_lead >= SURE:
        return head + f"{name(lead.group.variant)} reaches it with less compute ({p})"
    return head + "no difference at this budget" + (f" ({p})" if p else "")


# Verdicts (ablate.analysis.fit_trust) under which A is an extrapolation, not a measurement: such
# a variant is never the answer's winner, however high its fitted A.
# Matched as prefixes of the table's own label ("too short: 9 points"), so the sentence never
# calls pinned a fit its table calls short, unidentified or noisy.
UNPINNED = ("not bending yet", "A at bound", "too short", "too noisy")
GAIN_TO_PIN = 0.75  # "the compute it needs": where its own fit has made this share of its gain


def pinned(row) -> bool:
    """Is this ranked row's ceiling identified (its verdict is not one of UNPINNED)?"""
    return not str(row.group.verdict()[0]).startswith(UNPINNED)


def compute_to_pin(fit) -> float:
    """The compute at which the fitted curve has made GAIN_TO_PIN of its gain: C_mid x
    (g / (1 - g))^(1/B) (from R = R0 + (A - R0) / (1 + (C_mid/C)^B)). Past C_mid the curve has
    bent, and by 3/4 of its gain its runs show the ceiling it bends towards: the rule of thumb
    fit_trust's "train longer" means, in compute."""
    g = GAIN_TO_PIN
    return float(fit.C_mid * (g / (1.0 - g)) ** (1.0 / fit.B))


def _unpinned_clause(row, name: Names, x: str, leads: bool = False) -> str:
    """`leads`: the row is the answer's own leader (no variant is pinned). The advice points
    forward: a compute to pin the ceiling only when it lies beyond what the runs reached; when
    the runs are already past it (the fitted curve has bent, yet A's interval is too wide), what
    would pin it instead."""
    f = row.group.fit
    lo, hi = f.ci.get("A", (f.A, f.A))
    who = (f"{name(row.group.variant)}'s ceiling is not pinned" if leads else
           f"{name(row.group.variant)} may still rank higher, but its ceiling is not pinned")
    head = f"{who} ({row.group.verdict()[0]}: A {_num(f, 'A')}, 95% {interval(lo, hi)})"
    return f"{head}: {pin_advice(f, x)}"


def pin_advice(f, x: str) -> str:
    """What would pin a fit's ceiling, always ahead of where its runs are."""
    reached = f.window_max()
    need = compute_to_pin(f)
    if reached is None or need > reached:
        has = "" if reached is None else f"; its runs reach {compute(reached)}"
        return (f"it needs about {compute(need)} {x} to pin it ({GAIN_TO_PIN:.0%} of its fitted "
                f"gain{has})")
    made = (float(f.predict(reached)) - f.R0) / max(f.A - f.R0, 1e-12)
    return (f"its runs already reach {compute(reached)} {x}, where the fitted curve has made "
            f"{min(made, 1.0):.0%} of its gain, and A is still open: more seeds (or a larger "
            f"eval set) narrow it, or train past {compute(2 * reached)} to see the curve flatten")


def _fraction(budget: Optional[dict[str, float]], final: Optional[dict[str, float]]) -> str:
    """"20% of the final budget (flops 5e+11 of 2.5e+12)"; "an earlier stage's budget" if unknown."""
    if not budget or not final:
        return "an earlier stage's budget"
    (kind, val), = budget.items()
    end = final.get(kind)
    if not end:
        return f"{kind} {val:g}"
    return f"{100 * val / end:.0f}% of the final budget ({kind} {val:g} of {end:g})"


def _stage_clauses(stopped: dict[str, dict[str, Any]], stages: Optional[dict[str, Any]],
                   name: Names) -> list[str]:
    """What an adaptive study did to the variants it did not run to the end."""
    if not stages:
        return []
    budgets, decisions = stages.get("budgets") or [], stages.get("decisions") or []
    final = budgets[-1] if budgets else None
    n = len(budgets)
    out = [f"{name(v)} stopped at stage {w['stage'] + 1} of {n}, at {_fraction(w.get('budget'), final)}"
           f" ({w['reason']})" for v, w in stopped.items()]
    last = decisions[-1] if decisions else None
    if last and not stages.get("scale_winner", True) and len(last.get("kept", [])) == 1:
        w = name(last["kept"][0])
        out.append(f"{w} was the only variant left after stage {last['stage'] + 1} of {n} and "
                   f"was not scaled (scale_winner: false): it stands at "
                   f"{_fraction(last.get('budget'), final)}")
    return out


def _lead_pair(fitted: list, baseline: Optional[str]):
    """(lead, follow, P(lead beats follow)) from ranked rows: the top against the baseline, or
    against the runner-up when the baseline leads or is not among `fitted`. P is known where
    one of the two is the baseline (the rows carry P(beats baseline)), else None."""
    top = fitted[0]
    base = next((r for r in fitted if r.group.variant == baseline), None)
    if base is None or base is top:
        follow = fitted[1]
        if base is top:
            return top, follow, None if follow.p_beats is None else 1.0 - follow.p_beats
        return top, follow, None
    return top, base, top.p_beats


def _fell_clause(row, name: Names) -> str:
    """"0.3 peaked and fell (seed 1: 0.82 → 0.72)": a variant whose runs fell from their peak
    (ablate.analysis.sag), named in the answer as its verdict names it in the table."""
    runs = ", ".join(f"seed {s}: {f.peak:.2f} → {f.latest:.2f}" for s, f in row.group.falls)
    return f"{name(row.group.variant)} peaked and fell ({runs})"


def answer_sentence(analysis: Analysis) -> str:
    """One sentence: who wins by the paper's rule (or that nothing differs), with the baseline,
    the window, stopped/unscaled variants and failed fits named.

    The winner is the best-ranked variant whose ceiling is pinned (`pinned`): a variant whose A
    is an extrapolation ("not bending yet", "A at bound") can rank first on a fitted A that its
    data does not hold, so it is named after the answer as one that may still rank higher,
    with the compute it needs to pin its ceiling (`compute_to_pin`)."""
    fitted = [r for r in analysis.rows if r.rank is not None]
    failed = [r for r in analysis.rows if r.rank is None]
    x = analysis.curves.x
    where = f"window {analysis.window.text(x)}"
    if not fitted:
        why = failed[0].group.error if failed else "no data"
        return f"No variant could be fit, so nothing is ranked ({why})."
    name = names_for([r.group.variant for r in analysis.rows])  # the table's rows
    sure = [r for r in fitted if pinned(r)]
    if len(fitted) == 1 or len(sure) == 1:
        one = sure[0] if sure else fitted[0]
        f, v = one.group.fit, name(one.group.variant)
        rest = ("nothing to compare it with" if len(fitted) == 1 and not failed else
                "the only variant that could be fit, so nothing is compared"
                if len(fitted) == 1 else "the only variant whose ceiling is pinned")
        parts = [f"{v}{' has' if name.prefix else ':'} A {_num(f, 'A')}{_ci(f, 'A')}, "
                 f"B {_num(f, 'B')}{_ci(f, 'B')}; {rest}"]
        lead = one
        named = {one.group.variant}
    else:
        ranked = sure if sure else fitted
        lead, follow, p = _lead_pair(ranked, analysis.baseline)
        parts = [_pair(lead, follow, p, analysis.options.margin, name)]
        if not sure:
            parts.append("no variant's ceiling is pinned yet, so this ranks extrapolations")
        named = {lead.group.variant, follow.group.variant}
    # unpinned variants that could still beat the answer's winner: ranked above it, or with an
    # A interval reaching above its A
    lead_A = lead.group.fit.A
    for r in fitted:
        if r.group.variant in named and pinned(r):
            continue
        if not pinned(r) and (r.rank < lead.rank or r.group.fit.ci.get("A", (0, 0))[1] > lead_A
                              or r is lead):
            parts.append(_unpinned_clause(r, name, x, leads=r is lead))
            named.add(r.group.variant)
    more = len([r for r in fitted if r.group.variant not in named])
    if more:
        parts.append(f"{count(more, 'more variant')} {'ranks' if more == 1 else 'rank'} below "
                     "(see the table)")
    parts += [_fell_clause(r, name) for r in analysis.rows if r.group.falls]
    tail = f"({where})" if len(fitted) == 1 else \
        f"(baseline {name(analysis.baseline)}; {where})"
    parts += _stage_clauses(analysis.stopped, analysis.stages, name)
    if failed:
        parts.append(f"{count(len(failed), 'variant')} could not be fit: "
                     + ", ".join(name(r.group.variant) for r in failed))
    parts[0] = name.prefix + parts[0]  # the axis named once, before the first variant
    return "; ".join(parts) + " " + tail + "."  # variant names keep their case


def study_answer(study_dir) -> str:
    """The answer sentence for a study results dir with the default options (what the end of
    `ablate sweep --wait` prints; `ablate compare DIR` prints the same line), or why there is
    none yet, in one line."""
    try:
        return answer_sentence(analyze(study_dir))
    except InputError as e:
        return f"no answer yet: {e}"
