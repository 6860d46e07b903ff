"""Every relative link in the README, docs/ and benchmarks/ pages points at a file of this
repository (and a `#anchor` at a heading of that page), and the README stays a front page.

Why: the README is short because the manual moved to docs/; a page renamed or a heading
reworded would otherwise leave links that lead nowhere, and a link to a file outside the
repository (a design note beside the checkout) works only on the machine that wrote it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_MAX_BYTES = 10 * 1024

PAGES = sorted([ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("benchmarks/**/*.md")])

_FENCE = re.compile(r"^(```|~~~)")
_CODE_SPAN = re.compile(r"`[^`]*`")
_INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:, ...


def prose_lines(text: str):
    """(line number, line) of the lines outside fenced code blocks."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            yield n, line


def links(page: Path) -> list[tuple[int, str]]:
    """(line, target) of every inline, image and reference-style link on the page."""
    found = []
    for n, line in prose_lines(page.read_text(encoding="utf-8")):
        line = _CODE_SPAN.sub("", line)  # `[x](y)` in code is an example, not a link
        found += [(n, m.group(1)) for m in _INLINE.finditer(line)]
        ref = _REFERENCE.match(line)
        if ref:
            found.append((n, ref.group(1)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor GitHub gives the page's headings (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(page.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        k = seen.get(base, 0)
        seen[base] = k + 1
        out.add(base if k == 0 else f"{base}-{k}")
    return out


def broken(page: Path, target: str) -> str | None:
    """Why `target`, linked from `page`, leads nowhere; None when it resolves."""
    if _EXTERNAL.match(target):
        return None
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if ROOT != dest and ROOT not in dest.parents:
        return "points outside the repository"
    if not dest.exists():
        return "no such file"
    if anchor and dest.suffix == ".md" and anchor.lower() not in anchors(dest):
        return f"no heading with anchor #{anchor} in {dest.relative_to(ROOT)}"
    return None


def test_the_pages_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in PAGES}
    assert {"README.md", "docs/index.md", "benchmarks/RESULTS.md"} <= names, sorted(names)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    bad = [f"{page.relative_to(ROOT)}:{n}: ({t}) {why}"
           for n, t in links(page) if (why := broken(page, t))]
    assert not bad, "links that lead nowhere:\n" + "\n".join(bad)


def test_readme_is_a_front_page_not_the_manual():
    size = (ROOT / "README.md").stat().st_size
    assert size < README_MAX_BYTES, (
        f"README.md is {size:,} bytes (limit {README_MAX_BYTES:,}): move detail to a docs/ page "
        "and link it")


def test_every_docs_page_is_listed_in_the_index():
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    listed = {t.partition("#")[0] for _, t in links(ROOT / "docs" / "index.md")}
    missing = [p.name for p in ROOT.glob("docs/*.md")
               if p.name != "index.md" and p.name not in listed]
    assert not missing, f"docs pages not linked from docs/index.md: {missing}\n{index[:300]}"


def test_the_checker_sees_a_broken_link(tmp_path):
    """The checker itself: a missing file, a missing anchor and a path outside the repository
    are each reported; a good link and an external one are not."""
    page = ROOT / "docs" / "index.md"
    assert broken(page, "ARCHITECTURE.md") is None
    assert broken(page, "https://example.org/x.md") is None
    assert broken(page, "no_such_page.md") == "no such file"
    assert "no heading" in broken(page, "ARCHITECTURE.md#no-such-heading")
    assert broken(page, "../../shared/DESIGN.md") == "points outside the repository"
    assert slug("Where a new thing goes") in anchors(ROOT / "docs" / "ARCHITECTURE.md")
    md = tmp_path / "x.md"
    md.write_text("# A `code` heading, twice\n# A `code` heading, twice\n"
                  "```\n[not a link](nowhere.md)\n```\n`[nor](this.md)` [a](b.md)\n")
    assert anchors(md) == {"a-code-heading-twice", "a-code-heading-twice-1"}
    assert [t for _, t in links(md)] == ["b.md"]
