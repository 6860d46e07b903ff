"""No shared module names an executor: everything that depends on where runs go is asked of
the executor's module through launch.EXECUTORS (ablate/studies/launch/executor.py), so a new
executor is its module plus its registry line (docs/ARCHITECTURE.md, "where a new thing goes").

Read from the source, like tests/test_layers.py: in ablate/, outside an executor's own files
(ablate/studies/launch/NAME.py and NAME_*.py) and the registry (launch/__init__.py), no string
that is an executor's name or a job id's prefix (`"slurm"`, `"local:"`), no attribute of that
name (`profile.slurm`: its profile section) and no import of its module. trainer/ is left out:
it knows launchers (torchrun, srun's variables), not executors. What only some executors can
do is a capability they declare (executor.GpuNodes: `sweep --within`'s node sizing, the
GPU-need check), which shared code asks for through launch.gpu_nodes, never by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

from ablate.studies.launch import EXECUTORS

ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "ablate" / "studies" / "launch"

def owner(path: Path) -> str | None:
    """The executor whose own file this is (None: a shared module)."""
    if path.parent != LAUNCH:
        return None
    stem = path.stem
    return next((n for n in EXECUTORS if stem == n or stem.startswith(n + "_")), None)


def names_in(path: Path) -> set[str]:
    """The executor names this file uses: as a string, a job id prefix, an attribute, or an
    imported module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found |= {n for n in EXECUTORS if node.value in (n, n + ":")}
        elif isinstance(node, ast.Attribute):
            found |= {n for n in EXECUTORS if node.attr == n}
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            found |= {n for n in EXECUTORS for m in mods
                      if m.startswith(f"ablate.studies.launch.{n}")}
    return found


def test_no_executor_name_outside_its_module_and_the_registry():
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "ablate").rglob("*.py")):
        if path == LAUNCH / "__init__.py" or owner(path) is not None:
            continue
        names = names_in(path)
        if names:
            seen[path.relative_to(ROOT).as_posix()] = sorted(names)
    assert not seen, f"executor names outside their modules: {seen}"


def test_the_check_sees_each_kind_of_use(tmp_path):
    """The reader finds a name as a string, a job id prefix, an attribute and an import (a
    check that finds nothing would pass the test above on any code)."""
    f = tmp_path / "m.py"
    for name in EXECUTORS:
        for code in (f"x == {name!r}", f"j.startswith({name + ':'!r})", f"p.{name}.nodes",
                     f"from ablate.studies.launch.{name} import x"):
            f.write_text(code + "\n")
            assert names_in(f) == {name}, code
    f.write_text("x = 'slurm.tasks_per_node'  # a key in a message is fine\n")
    assert names_in(f) == set()
