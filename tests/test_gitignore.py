"""The repository's .gitignore leaves no source folder out of a commit."""

from __future__ import annotations

import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("ablate", "trainer", "tests", "docs", "benchmarks", "recipes", "sweeps")


def test_no_source_folder_matches_an_ignore_pattern():
    """`dist/` unanchored also matched trainer/dist/ (a new file there was silently left out of
    `git add`): build outputs are ignored at the repository root only (`/dist/`, `/build/`),
    and no folder of the sources matches an unanchored folder pattern."""
    lines = [x.strip() for x in (ROOT / ".gitignore").read_text().splitlines()]
    assert "/dist/" in lines and "/build/" in lines, lines
    folder_patterns = [x.rstrip("/") for x in lines if x.endswith("/") and "/" not in x[:-1]
                       and not x.startswith(("#", "!"))]
    for top in SOURCES:
        for d in [ROOT / top, *(ROOT / top).glob("**/")]:
            if d.name in ("__pycache__",) or not d.is_dir():
                continue
            hit = [p for p in folder_patterns if fnmatch.fnmatch(d.name, p)]
            assert not hit, f"{d.relative_to(ROOT)}/ is ignored by .gitignore's {hit}"
