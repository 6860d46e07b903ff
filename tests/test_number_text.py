"""One rule for numbers (ablate/number_text.py; issue 41, point 8): an estimate down to the
second significant digit of its interval's width, the same digit for the value and both ends,
trailing zeros kept; a compute said alone to 3 significant digits, one way everywhere."""

from __future__ import annotations

import pytest

from ablate.number_text import compute, count, estimate, interval, number, span


@pytest.mark.parametrize("v, ci, want", [
    (0.7701, (0.75318, 0.80497), "0.770 [0.753, 0.805]"),  # not [0.7532, 0.805]
    (0.863, (0.848, 0.880), "0.863 [0.848, 0.880]"),  # the trailing zero kept
    (2.33, (0.84, 4.50), "2.3 [0.8, 4.5]"),  # a wide interval earns fewer digits
    (0.93, (0.78, 1.09), "0.93 [0.78, 1.09]"),
    (0.03643, (0.03481, 0.03858), "0.0364 [0.0348, 0.0386]"),
    (1.2e11, (8e10, 2.1e11), "1.2e+11 [8e+10, 2.1e+11]"),  # large: scientific, same digit
    (0.5, (0.4, None), "0.5 [0.4, ∞]"),  # an end the fit cannot bound: 3 significant digits
])
def test_an_estimate_has_the_digits_its_interval_earns(v, ci, want):
    assert estimate(v, ci) == want


def test_the_value_alone_and_the_interval_alone_follow_the_same_rule():
    assert number(0.7701, (0.75318, 0.80497)) == "0.770"
    assert interval(0.75318, 0.80497) == "[0.753, 0.805]"
    assert number(None) == "—" and estimate(float("nan"), (0, 1)) == "—"
    assert number(0.86342) == "0.863"  # no interval: 3 significant digits


def test_a_compute_and_a_window_are_said_one_way():
    assert compute(1.96e9) == "1.96e+09" and compute(2.5e12) == "2.5e+12"
    assert span(1.96e9, 2.5e12) == "1.96e+09–2.5e+12"  # never 2e+09-2.5e+12 here and there
    assert span(None, 0.05) == "first point–0.05"


def test_two_computes_compared_are_printed_apart():
    from ablate.number_text import computes_apart

    assert computes_apart(2.8712e10, 2.8745e10) == ("2.871e+10", "2.874e+10")
    assert computes_apart(1.5e9, 3e10) == ("1.5e+09", "3e+10")  # the usual 3 digits
    assert computes_apart(5.0, 5.0) == ("5", "5")  # equal: said alike


def test_a_count_agrees_with_its_noun():
    assert [count(n, "run") for n in (0, 1, 2, 1200)] == ["0 runs", "1 run", "2 runs", "1,200 runs"]
    assert count(1, "seed") == "1 seed" and count(3, "copy", "copies") == "3 copies"
