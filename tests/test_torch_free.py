"""The modules `ablate` imports to validate and plan thousands of variants import no torch:
the config (whose allowed names of every axis are read from the trainer's registries,
trainer/algo/, trainer/tasks.py and trainer/torch_axes.py, over the rollout types of
trainer/rollouts.py), the cross-field validation, the plans (trainer/plan/)
and the binding the trainer's start-up computes before CUDA starts.

Read from the source, as tests/test_layers.py reads the import graph: every import that runs
when the module is imported (module level, outside `if TYPE_CHECKING:`, not inside a function)
and, through those, everything they import, parent packages included."""

from __future__ import annotations

import ast

from test_layers import module_files, statement_imports

TORCH_FREE = ("trainer.config", "trainer.validate", "trainer.plan.memory", "trainer.plan.time_plan",
              "trainer.plan.topology", "trainer.dist.binding", "trainer.algo.losses",
              "trainer.algo.advantages", "trainer.algo.length", "trainer.algo.pool",
              "trainer.tasks", "trainer.rollouts", "trainer.torch_axes")
HEAVY = ("torch", "transformers", "deepspeed", "vllm", "numpy")


def import_time_names(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Dotted names imported when the module runs: its top-level statements (and the bodies of
    top-level if/try), never function or class bodies' deferred imports nor TYPE_CHECKING."""
    package = module if is_package else module.rpartition(".")[0]
    names, stack = set(), list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                stack.extend(node.body)
            stack.extend(node.orelse)
        elif isinstance(node, ast.Try):
            stack.extend(node.body + node.orelse + node.finalbody)
        else:
            names.update(statement_imports(node, package))
    return names


def closure(start: str, mods: dict) -> tuple[set[str], dict[str, str]]:
    """The project modules importing `start` runs, and the outside modules each imports."""
    seen, outside, todo = set(), {}, [start]
    while todo:
        mod = todo.pop()
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):  # parent packages run first
            m = ".".join(parts[:i])
            if m in seen or m not in mods:
                continue
            seen.add(m)
            path = mods[m]
            for name in import_time_names(ast.parse(path.read_text()), m,
                                          path.name == "__init__.py"):
                if name.split(".")[0] in ("ablate", "trainer"):
                    todo.append(name)
                else:
                    outside.setdefault(name.split(".")[0], m)
    return seen, outside


def test_config_validation_and_plans_import_no_torch():
    mods = module_files()
    for start in TORCH_FREE:
        assert start in mods, start
        _, outside = closure(start, mods)
        heavy = {lib: by for lib, by in outside.items() if lib in HEAVY}
        assert not heavy, f"importing {start} imports {heavy} (library: the module importing it)"


def test_the_check_sees_an_import_of_torch():
    mods = module_files()
    _, outside = closure("trainer.loop.update", mods)
    assert outside.get("torch") == "trainer.loop.update"
