"""Import layering, read from the source (no imports run): no import cycles among ablate/ and
trainer/ modules, function-local imports included, trainer/ importing nothing of ablate,
directly or not, and trainer/'s own parts importing downward (no cycle among its subpackages and
root modules; the RL maths reaching nothing of the generation service or the eval, the models
nothing of the generation service).

Why from the AST: a function-local import hides a cycle from Python (it only bites when that
function runs first, in some order nobody tested), so the graph takes every `import` and
`from ... import` at any depth. Imports under `if TYPE_CHECKING:` never run and are left out.
What a module brings in is the closure of that graph (`loaded_by`), where importing `a.b.c`
also runs the packages `a` and `a.b`: a module that imports a package whose `__init__`
imports a layer reaches that layer as surely as one that imports it by name.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ablate", "trainer")

# Cycles that exist today, each named with why it is still here. An entry that no longer is a
# cycle fails the test too, so a cycle that goes is struck off.
ALLOWED_CYCLES: dict[frozenset[str], str] = {
    frozenset({"trainer.plan.memory", "trainer.plan.placement", "trainer.plan.split_choice",
               "trainer.plan.time_jobs", "trainer.plan.time_model", "trainer.plan.time_plan",
               "trainer.plan.topology"}):
        "generation_gpus auto is defined by recursion: topology() of an auto config is the "
        "split whose memory and time plans (which lay out a numbered split with topology()) "
        "are best; one function-local import in topology() closes it, and the recursion "
        "stops at numbers. Breaking it means every caller resolving auto before it plans.",
}


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages."""
    mods = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = f
    return mods


def _runtime_nodes(tree: ast.AST):
    """Every node except those under `if TYPE_CHECKING:` (imports for annotations only)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
            else:
                stack.append(child)


def imported_names(module: str, path: Path) -> set[str]:
    """Dotted names a module imports, at any depth: `from a import b` gives a.b (a submodule)
    when a.b is a module, else a (a name defined in a's __init__)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        names.update(statement_imports(node, package))
    return names


def statement_imports(node: ast.AST, package: str) -> set[str]:
    """The dotted names one import statement names (none for any other node), relative
    imports resolved against `package`."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names}
    if not isinstance(node, ast.ImportFrom):
        return set()
    base = node.module or ""
    if node.level:
        up = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join(up + ([base] if base else []))
    return {f"{base}.{a.name}" for a in node.names}


@functools.lru_cache(maxsize=1)
def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports (a name resolves to its longest module
    prefix: `ablate.cli.app` -> `ablate.cli`). Parsed once per session (callers only read it):
    every layer test walks the same graph."""
    mods = module_files()

    def resolve(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for mod, path in mods.items():
        targets = {resolve(n) for n in imported_names(mod, path)}
        graph[mod] = {t for t in targets if t and t != mod}
    return graph


def loaded_by(module: str, graph: dict[str, set[str]],
              stop: frozenset[str] = frozenset()) -> dict[str, str | None]:
    """Every module that importing `module` may run (function-local imports included): the
    closure of `graph` where a module also runs its parent packages' `__init__`. Maps each to
    the module that brought it in (None for `module`), for `chain`. A module in `stop` is
    reached but not followed (its parent packages still run): a boundary whose own imports
    are another test's business."""
    def with_packages(name: str) -> list[str]:
        parts = name.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts))] + [name]

    came_from: dict[str, str | None] = {module: None}
    todo = [module]
    while todo:
        node = todo.pop()
        own = sorted(graph.get(node, ())) if node == module or node not in stop else []
        for name in own + with_packages(node)[:-1]:
            if name in graph and name not in came_from:
                came_from[name] = node
                todo.append(name)
    return came_from


def chain(came_from: dict[str, str | None], name: str) -> str:
    """`a -> b -> name`: how `loaded_by`'s module reaches `name`."""
    path = [name]
    while came_from[path[-1]] is not None:
        path.append(came_from[path[-1]])
    return " -> ".join(reversed(path))


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.add(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    found.append(frozenset(comp))
    return found


def test_cycle_finder_sees_function_local_imports(tmp_path):
    """The finder itself: imports inside functions count, TYPE_CHECKING ones do not, and a
    cycle closed by any of them is reported."""
    src = tmp_path / "proxy.py"
    src.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ablate.x\n"
                   "def f():\n    from trainer.model import load_model\n"
                   "    from . import tasks\n")
    assert imported_names("trainer.proxy", src) == {"typing.TYPE_CHECKING",
                                                    "trainer.model.load_model", "trainer.tasks"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]


def test_closure_sees_packages_and_indirect_imports():
    """The closure itself: `a.x` imports the package `b.p` (whose `__init__` imports `c.q`)
    only through a module of `b.p`, and `c.q` imports `d`: `a.x` reaches `c.q` and `d`,
    and the chain says how; a module reaches nothing it does not import."""
    graph = {"a": set(), "a.x": {"b.p.m"}, "b": set(), "b.p": {"c.q"}, "b.p.m": set(),
             "c": set(), "c.q": {"d"}, "d": set(), "e": set()}
    got = loaded_by("a.x", graph)
    assert set(got) == {"a", "a.x", "b", "b.p", "b.p.m", "c", "c.q", "d"}, got
    assert chain(got, "d") == "a.x -> b.p.m -> b.p -> c.q -> d", chain(got, "d")
    assert set(loaded_by("e", graph)) == {"e"}
    # a boundary is reached, not followed: b.p's own imports stay out, its package runs
    assert set(loaded_by("a.x", graph, stop=frozenset({"b.p"}))) == {"a", "a.x", "b", "b.p",
                                                                     "b.p.m"}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """A shared fixture: the fast tier charges the parse to it, not to the first test."""
    return import_graph()


def test_no_import_cycles_beyond_the_named_ones(graph):
    found = set(cycles(graph))
    new = [sorted(c) for c in found - set(ALLOWED_CYCLES)]
    gone = [sorted(c) for c in set(ALLOWED_CYCLES) - found]
    assert not new, f"import cycles (function-local imports included): {new}"
    assert not gone, f"allow-listed cycles that are gone or changed, update ALLOWED_CYCLES: {gone}"


def test_trainer_imports_nothing_of_ablate(graph):
    bad = []
    for m in sorted(graph):
        if m == "trainer" or m.startswith("trainer."):
            got = loaded_by(m, graph)
            bad += [chain(got, n) for n in sorted(got) if n == "ablate" or n.startswith("ablate.")]
    assert not bad, bad


# trainer/'s parts that may not reach another, not even through a package `__init__`: the RL
# maths (algo/) is one function per axis value over the rollout types (trainer/rollouts.py), so
# a newcomer reads a loss without the generation service, the eval or the policy's loading;
# the models (models/) are what reads the policy, below what samples it.
TRAINER_FORBIDDEN = {
    "trainer.algo": ("trainer.generation", "trainer.evaluate", "trainer.policy", "trainer.loop"),
    "trainer.models": ("trainer.generation", "trainer.evaluate", "trainer.policy",
                       "trainer.warmup", "trainer.loop"),
    "trainer.rollouts": ("trainer.generation", "trainer.algo", "trainer.models"),
    "trainer.config": ("trainer.generation", "trainer.evaluate", "trainer.policy",
                       "trainer.warmup", "trainer.plan", "trainer.loop"),
    # the names of the torch axes sit below what implements them (imported by name on use)
    "trainer.torch_axes": ("trainer.generation", "trainer.engine", "trainer.engine_deepspeed",
                           "trainer.loop", "trainer.models", "trainer.config"),
}


def trainer_graph() -> dict[str, set[str]]:
    """The import graph without the `trainer` package's own edges: its one import is `run`'s
    function-local import of the loop, the entry point at the top of every stack. Importing
    trainer.algo.losses runs trainer/__init__.py, which defines `run` and imports nothing."""
    graph = import_graph()
    return {**graph, "trainer": set()}


def trainer_part(module: str) -> str | None:
    """trainer.algo.losses -> trainer.algo: the subpackage or root module a module is part of
    (None outside trainer/ and for the package itself)."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "trainer" and len(parts) > 1 else None


def test_trainer_root_package_imports_nothing_at_import():
    """What trainer_graph leaves out is only `run`'s deferred import of the loop."""
    tree = ast.parse((ROOT / "trainer" / "__init__.py").read_text())
    top = set().union(*(statement_imports(n, "trainer") for n in tree.body))
    assert not {n for n in top if n.startswith("trainer.")}, top


@pytest.mark.parametrize("part", sorted(TRAINER_FORBIDDEN))
def test_trainer_part_reaches_nothing_above_it(part):
    graph = trainer_graph()
    mods = [m for m in graph if m == part or m.startswith(part + ".")]
    assert mods, f"no module under {part}"
    bad = []
    for m in sorted(mods):
        got = loaded_by(m, graph)
        bad += [chain(got, n) for n in sorted(got)
                if any(n == f or n.startswith(f + ".") for f in TRAINER_FORBIDDEN[part])]
    assert not bad, bad[:20]


def test_trainer_parts_import_downward():
    """No cycle among trainer/'s subpackages and root modules (algo, config, generation, ...,
    tasks): the module cycles named in ALLOWED_CYCLES live inside one part (trainer/plan/)."""
    parts: dict[str, set[str]] = {}
    for m, targets in trainer_graph().items():
        if trainer_part(m):
            parts.setdefault(trainer_part(m), set()).update(
                trainer_part(t) for t in targets if trainer_part(t) not in (None, trainer_part(m)))
    assert len(parts) > 10, sorted(parts)
    found = [sorted(c) for c in cycles(parts)]
    assert not found, f"import cycles among trainer/'s parts: {found}"


# The built-in trainer behind its adapter: outside ablate/adapters/builtin, ablate reaches the
# trainer only through the adapter's public face (the package `ablate.adapters.builtin`, its
# `__init__`: the job-shape vocabulary and the plans the dry run, the split lines, the GPU check
# and the sizing ask for) and trainer/rundir.py (a run dir's files, the on-disk contract every
# layer reads). So a change inside trainer/ (a module moved, a function renamed) is the
# adapter's to absorb, and a reader of ablate/studies or ablate/cli meets no trainer module.
BUILTIN = "ablate.adapters.builtin"
TRAINER_CONTRACT = "trainer.rundir"


def _behind_adapter(module: str, graph: dict[str, set[str]]) -> list[str]:
    """How `module` reaches past the adapter: a trainer module other than rundir, the trainer
    package's own `run` (`import trainer`), or a module inside the adapter."""
    inside = {m for m in graph if m.startswith(BUILTIN + ".")}  # reached is enough: not followed
    got = loaded_by(module, graph, stop=frozenset({BUILTIN, TRAINER_CONTRACT, *inside}))
    bad = [chain(got, n) for n in sorted(got)
           if n.startswith("trainer.") and n != TRAINER_CONTRACT or n.startswith(BUILTIN + ".")]
    bad += [chain(got, n) + " -> trainer" for n in sorted(got)
            if "trainer" in graph.get(n, ()) and n not in (BUILTIN, TRAINER_CONTRACT)]
    return bad


def test_boundary_finder_sees_trainer_and_adapter_internals():
    """The rule itself: a module reaching trainer.config through another, importing the
    trainer package for its `run`, or importing the adapter's internals fails; one importing
    rundir or the adapter's face (whose own imports are its business) passes."""
    graph = {"ablate": set(), "ablate.a": {"ablate.b"}, "ablate.b": {"trainer.config"},
             "ablate.c": {"trainer"}, "ablate.d": {"ablate.adapters.builtin.study"},
             "ablate.e": {"trainer.rundir", BUILTIN}, "ablate.adapters": set(),
             BUILTIN: {"trainer.config", "ablate.adapters.builtin.study"},
             "ablate.adapters.builtin.study": set(), "trainer": set(), "trainer.rundir": set(),
             "trainer.config": set()}
    assert _behind_adapter("ablate.a", graph) == ["ablate.a -> ablate.b -> trainer.config"]
    assert _behind_adapter("ablate.c", graph) == ["ablate.c -> trainer"]
    assert _behind_adapter("ablate.d", graph) == ["ablate.d -> ablate.adapters.builtin.study"]
    assert _behind_adapter("ablate.e", graph) == []


def test_builtin_trainer_is_behind_its_adapter():
    graph = trainer_graph()  # trainer/__init__'s deferred `run` import: caught by name above
    outside = [m for m in sorted(graph) if m.startswith("ablate")
               and m != BUILTIN and not m.startswith(BUILTIN + ".")]
    assert len(outside) > 100, len(outside)
    bad = sorted({line for m in outside for line in _behind_adapter(m, graph)}, key=len)
    assert not bad, bad[:20]  # the shortest chains first: the import to change ends each
