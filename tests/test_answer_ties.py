"""Three variants within the margin: the answer sentence and compare's table speak of one tie
group refit at one shared A, so they print the same A's, the same shared A and the same B's
(the refits are made once, in ablate.analysis.compare, and the sentence reads them)."""

from __future__ import annotations

import io
import re

from rich.console import Console

import synthetic as sy
from _curves_util import curves_frame

# one ceiling, three speeds: with these curves (SEED) the three fitted A's lie within 0.02,
# and the pair the sentence names has another mean A than the three (the old sentence's refit)
SEED = 2
TRUTHS = {"a": sy.Truth(0.60, 1.6, 0.01, 0.1), "b": sy.Truth(0.60, 1.1, 0.01, 0.1),
          "c": sy.Truth(0.60, 1.3, 0.01, 0.1)}
SENTENCE = re.compile(r"(\w+) and (\w+) tie on A \(([\d.]+) vs ([\d.]+), within 0\.02\); at the "
                      r"shared A ([\d.]+), B ([\d.]+) vs ([\d.]+)")
NOTE = re.compile(r"at shared A=([\d.]+), B ([\d.]+) vs (.*)")


def _analysis():
    from ablate.analysis.pipeline import Options, analyze_curves
    from ablate.analysis.sources import Curves

    frame = curves_frame(seed=SEED, truths=TRUTHS, n_points=30)
    return analyze_curves(Curves(frame, "synthetic", "compute", "score"), Options(n_boot=0, min_compute=0))


def _table(a) -> str:
    from ablate.cli.render import print_compare

    con = Console(width=250, record=True, file=io.StringIO())
    print_compare(con, a.rows, a.groups, x="compute", y="score", base=a.baseline,
                  margin=a.options.margin, budget=None, wide=True)
    return con.export_text()


def test_three_variants_within_the_margin_sentence_and_table_agree_on_every_A_and_B():
    from ablate.analysis.answer import answer_sentence

    a = _analysis()
    ranked = [r for r in a.rows if r.rank is not None]
    assert len(ranked) == 3 and all(r.note.startswith("A within 0.02 of ") and
                                    r.note.count(",") == 3 for r in ranked), \
        ("the test needs one tie group of three", [r.note for r in ranked])
    sentence, table = answer_sentence(a), _table(a)
    m = SENTENCE.search(sentence)
    assert m, sentence
    lead, follow, a_lead, a_follow, shared, b_lead, b_follow = m.groups()
    # the A column of the table, by variant
    table_A = {}
    for line in table.splitlines():
        cells = line.split()
        if len(cells) > 2 and cells[0].isdigit() and cells[1] in TRUTHS:
            table_A[cells[1]] = cells[2]
    assert (table_A[lead], table_A[follow]) == (a_lead, a_follow), (sentence, table)
    # the table's notes (one line each): the group's shared A and each member's B there
    found = [NOTE.search(line).groups() for line in table.splitlines() if NOTE.search(line)]
    assert len(found) == 3, table
    # the sentence prints 3 significant digits (no interval here), the note 3 decimals for A
    # and 2 for B: equal up to the coarser rounding
    B_at_shared: dict[str, set[float]] = {}
    for A_note, _, others in found:
        assert abs(float(A_note) - float(shared)) <= 5.1e-4, (sentence, table)
        for name, b in re.findall(r"(\w+) ([\d.]+)", others):
            B_at_shared.setdefault(name, set()).add(float(b))
    for v, b in ((lead, b_lead), (follow, b_follow)):
        (b_note,) = B_at_shared[v]  # every note gives it one B
        assert abs(b_note - float(b)) <= 5.1e-3, (v, sentence, table)
