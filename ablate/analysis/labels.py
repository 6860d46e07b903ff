"""Variant labels as people read them: the axes named once, each variant by the values that differ.

Tables (ablate/cli/tables.py), the live sweep view and the answer sentence all name variants
this way, so the sentence above a ranking says what its rows say. Pure string work: no rich
tables here, so analysis can use it without importing the command line.
"""

from __future__ import annotations

import re
from typing import Optional

from rich.cells import cell_len

LEGEND_MAX = 90  # a legend listing more values than fit on a line names the axes only


ASSIGN = re.compile(r",(?=[A-Za-z_][\w.\-]*=)")  # a comma that starts the next `axis=value`


def assignments(label: str) -> Optional[tuple[list[str], list[str]]]:
    """`a.b=x,c=y` -> (["a.b", "c"], ["x", "y"]); None for a label not of that form."""
    parts = [p.split("=", 1) for p in ASSIGN.split(label)]
    if not all(len(p) == 2 for p in parts):
        return None
    return [p[0] for p in parts], [p[1] for p in parts]


def shorten(labels: list[str]) -> tuple[str, dict[str, str]]:
    """(legend, label -> short label). When every label assigns the same axes (a grid or a
    single-axis study), the table shows only the values that differ and the legend names the
    axes once, e.g. `off_policy.mode: pipeline | ppo_off_policy`; an axis every label sets to
    the same value goes to the legend as `axis=value`. Anything else (one-at-a-time studies,
    `base`, plain names from a CSV) is shown as written, with no legend."""
    same = ("", {lab: lab for lab in labels})
    parsed = [assignments(lab) for lab in labels]
    if len(labels) < 2 or any(p is None for p in parsed):
        return same
    keys = parsed[0][0]  # type: ignore[index]
    if any(p[0] != keys for p in parsed if p):
        return same
    values = [p[1] for p in parsed if p]  # one row of values per label
    varying = [i for i in range(len(keys)) if len({row[i] for row in values}) > 1]
    fixed = [f"{keys[i]}={values[0][i]}" for i in range(len(keys)) if i not in varying]
    short = {lab: ", ".join(row[i] for i in varying) for lab, row in zip(labels, values)}
    if not varying or len(set(short.values())) < len(set(labels)):
        return same
    head = [f"variant = {', '.join(keys[i] for i in varying)}"] if len(varying) > 1 else []
    legend = "\n".join(head + [_values(keys[i], [row[i] for row in values]) for i in varying])
    return legend + (f" (all {', '.join(fixed)})" if fixed else ""), short


def _values(axis: str, values: list[str]) -> str:
    """`axis: a | b`, or `axis: n values` when the list would not fit a line."""
    listed = f"{axis}: " + " | ".join(dict.fromkeys(values))
    return listed if cell_len(listed) <= LEGEND_MAX else f"{axis}: {len(set(values))} values"


def differing_axes(labels: list[str]) -> list[str]:
    """The axes whose values differ between labels of the `a=x,b=y` form (same axes in each);
    [] when the labels are not of that form."""
    parsed = [assignments(lab) for lab in labels]
    if not parsed or any(p is None for p in parsed):
        return []
    keys = parsed[0][0]  # type: ignore[index]
    if any(p[0] != keys for p in parsed):  # type: ignore[index]
        return []
    rows = [p[1] for p in parsed]  # type: ignore[index]
    return [k for i, k in enumerate(keys) if len({row[i] for row in rows}) > 1]
