"""Every package whose `__init__` lists its modules (indented `name.py  what it does` lines)
lists all of them, so a
newcomer reading the listing sees every part (issue 49 point 5: three listings had fallen
behind their folders)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _listing_gaps() -> dict[str, list[str]]:
    gaps = {}
    for init in sorted([*ROOT.glob("trainer/**/__init__.py"), *ROOT.glob("ablate/**/__init__.py")]):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        if not re.search(r"^ {2,}\w+\.py ", doc, re.M):
            continue  # a package that does not list its modules
        here = [p.name for p in init.parent.glob("*.py") if p.name not in ("__init__.py",
                                                                           "__main__.py")]
        missing = [m for m in here if not re.search(rf"\b{re.escape(m)}\b", doc)]
        if missing:
            gaps[str(init.relative_to(ROOT))] = missing
    return gaps


def test_every_listing_names_every_module_of_its_package():
    assert _listing_gaps() == {}
