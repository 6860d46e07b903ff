"""A number as every table, sentence and page prints it: one rule, in one place.

An estimate is shown to the precision its interval earns: the last digit printed is the
second significant digit of the interval's width, for the value and both ends alike, with
trailing zeros kept. `0.753 [0.718, 0.805]`, never `[0.7532, 0.805]` (a 4-significant-digit
format drops the 0 that 0.8050 ends in and keeps one that 0.7532 does not earn); a B of
`2.3 [0.8, 4.5]` says no more than its interval knows. A compute with no interval of its own
(a window, a budget, where runs reached) is given to 3 significant digits, the same way in the
answer sentence, the table's caption and the report (`2.69e+10`, never `2.7e+10` here and
`2.69e+10` there). Intervals never reach this module's callers as text: `--json` keeps
the full numbers.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

COMPUTE_DIGITS = 3  # significant digits of a compute said without an interval
WIDTH_DIGITS = 2  # significant digits of an interval's width that the printed numbers show
MAX_DIGITS = 6  # no estimate is worth more significant digits than this, whatever its width
INFINITE = "∞"  # an interval end the fit cannot bound (a target above a reachable score)


def _finite(v: Optional[float]) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def _last_digit(interval: Optional[Sequence[Optional[float]]]) -> Optional[int]:
    """The power of ten of the last digit an interval's width earns (None: no usable width)."""
    if not interval or len(interval) != 2 or not all(_finite(v) for v in interval):
        return None
    width = abs(float(interval[1]) - float(interval[0]))
    if width <= 0:
        return None
    return math.floor(math.log10(width)) - (WIDTH_DIGITS - 1)


def _at(v: float, last: int) -> str:
    """`v` printed down to the digit 10**last: fixed-point for everyday magnitudes, else
    scientific with as many significant digits as reach that digit (at least one)."""
    mag = math.floor(math.log10(abs(v))) if v else 0
    if -4 <= mag < 6:
        decimals = max(0, -last)
        digits = mag + decimals + 1
        if digits > MAX_DIGITS:
            decimals = max(0, decimals - (digits - MAX_DIGITS))
        return f"{v:.{decimals}f}"
    digits = min(MAX_DIGITS, max(1, mag - last + 1))
    return f"{v:.{digits - 1}e}"


def number(v: Optional[float], interval: Optional[Sequence[Optional[float]]] = None) -> str:
    """An estimate alone, at its interval's precision ("—" for none; 3 significant digits
    when the interval gives no width)."""
    if not _finite(v):
        return "—"
    last = _last_digit(interval)
    return f"{v:.{COMPUTE_DIGITS}g}" if last is None else _at(float(v), last)


def interval(lo: Optional[float], hi: Optional[float]) -> str:
    """`[lo, hi]` at the interval's precision; an end it cannot bound reads ∞."""
    last = _last_digit((lo, hi))

    def end(e: Optional[float]) -> str:
        if not _finite(e):
            return INFINITE
        return f"{e:.{COMPUTE_DIGITS}g}" if last is None else _at(float(e), last)

    return f"[{end(lo)}, {end(hi)}]"


def estimate(v: Optional[float], ci: Optional[Sequence[Optional[float]]]) -> str:
    """`v [lo, hi]`: a value and its 95% interval, one precision for the three."""
    if not _finite(v):
        return "—"
    if not ci or len(ci) != 2:
        return number(v)
    return f"{number(v, ci)} {interval(ci[0], ci[1])}"


def compute(c: Optional[float]) -> str:
    """A compute said on its own (a window's end, a budget, what runs reached)."""
    return "—" if not _finite(c) else f"{c:.{COMPUTE_DIGITS}g}"


def computes_apart(a: float, b: float) -> tuple[str, str]:
    """Two computes compared in one sentence ("a < b"), each as `compute` writes it, with more
    significant digits where that would print them alike (up to 6; then they are alike)."""
    for digits in range(COMPUTE_DIGITS, 7):
        sa, sb = f"{a:.{digits}g}", f"{b:.{digits}g}"
        if sa != sb:
            return sa, sb
    return sa, sb


def span(lo: Optional[float], hi: Optional[float], *, lo_none: str = "first point",
         hi_none: str = "last point") -> str:
    """A compute range, `2.69e+10–2.5e+12`: the fit window, said once this way everywhere."""
    a = lo_none if lo is None else compute(lo)
    b = hi_none if hi is None else compute(hi)
    return f"{a}–{b}"


def count(n: int, noun: str, plural: Optional[str] = None) -> str:
    """`1 run`, `2 runs`, `1,200 runs`: a count with its noun agreed (never `1 runs`, `run(s)`)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"
