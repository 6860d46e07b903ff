"""Issue 51 point 4: the sentence's "pinned" reads the table's fit-quality label."""
from types import SimpleNamespace

import pytest

from ablate.analysis.answer import pinned


def _row(label: str):
    return SimpleNamespace(group=SimpleNamespace(verdict=lambda: (label, "")))


@pytest.mark.parametrize("label", ["too short: 9 points", "too noisy: R^2 0.41",
                                   "not bending yet: A unidentified", "A at bound"])
def test_short_noisy_unidentified_are_not_pinned(label):
    assert not pinned(_row(label))


def test_ok_is_pinned():
    assert pinned(_row("ok"))
