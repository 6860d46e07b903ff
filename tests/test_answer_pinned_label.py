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


@pytest.mark.slow
def test_compare_never_leads_with_a_short_fit(tmp_path):
    import numpy as np

    from tests._cli import ablate_script
    rows = ["variant,seed,compute,score"]
    for v, n, A in [("short", 9, 0.7), ("long", 40, 0.6)]:
        for c in np.geomspace(10, 10000, n):
            rows.append(f"{v},0,{c:.3f},{0.1 + (A - 0.1) / (1 + (300 / c) ** 1.5):.4f}")
    (tmp_path / "m.csv").write_text("\n".join(rows) + "\n")
    r = ablate_script("compare", "m.csv", cwd=tmp_path, columns=400)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    assert "too short: 9 points" in r.stdout  # the table's label for 'short'
    assert first.startswith("long:") and "short may still rank higher, but its ceiling is not pinned" in first
