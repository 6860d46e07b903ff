"""Every package's __init__.py names each module and subpackage it holds in its docstring, so
a newcomer opening a folder reads what each file is for before opening it (the trainer's
folders list theirs as a table, ablate's in prose or a table).

Why a test: a module added to a folder and not to its listing is how three __init__ files fell
behind their folders before; the listing is only worth reading if it is whole.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.parent for top in ("ablate", "trainer") for p in (ROOT / top).rglob("__init__.py")
                  if "__pycache__" not in p.parts)


def held(package: Path) -> list[str]:
    """The modules (file stems) and subpackages (folder names) a package holds."""
    return sorted([f.stem for f in package.glob("*.py") if f.name != "__init__.py"]
                  + [d.name for d in package.iterdir() if (d / "__init__.py").is_file()])


def unnamed(package: Path) -> list[str]:
    """What the package holds and its __init__.py's docstring does not name (as a word, not
    as part of a dotted name or a longer word)."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    return [m for m in held(package) if not re.search(rf"(?<![\w.]){re.escape(m)}\b", doc)]


@pytest.mark.parametrize("package", PACKAGES,
                         ids=lambda p: p.relative_to(ROOT).as_posix())
def test_init_docstring_names_every_module(package):
    missing = unnamed(package)
    assert not missing, f"{package.relative_to(ROOT)}/__init__.py does not name {missing}"


def test_the_check_sees_a_missing_module(tmp_path):
    (tmp_path / "__init__.py").write_text('"""Holds a.py; trainer.b is elsewhere; abc is not it."""\n')
    for name in ("a.py", "b.py", "sub/__init__.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    assert held(tmp_path) == ["a", "b", "sub"]
    assert unnamed(tmp_path) == ["b", "sub"]
