"""Layers import one way, read from the source (function-local imports included, TYPE_CHECKING
ones left out: tests/test_layers.py's graph): the CLI on top, then studies (plan, submit,
wait), then analysis, then the trainers' adapters (every trainer, the built-in one included:
the study layer and the analysis both ask them), with ablate/studydir.py at the bottom so every
layer reads a study dir through one owner. A layer may not reach a higher one at all: not by
name, not through a module it imports, not through a package `__init__` (test_layers.loaded_by).
"""

from __future__ import annotations

import pytest
from test_layers import chain, import_graph, loaded_by, module_files

# importer prefix -> prefixes nothing it imports may reach
FORBIDDEN = {
    "ablate.analysis": ("ablate.studies", "ablate.cli"),
    "ablate.studies": ("ablate.cli",),
    "ablate.adapters": ("ablate.studies", "ablate.analysis", "ablate.cli"),
    "ablate.studydir": ("ablate.studies", "ablate.cli", "ablate.analysis", "ablate.adapters"),
}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    """A shared fixture: the fast tier charges the parse to it, not to the first test."""
    return import_graph()


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_above_it(layer, graph):
    mods = module_files()
    assert any(_under(m, layer) for m in mods), f"no module under {layer}"
    bad = []
    for m in sorted(m for m in graph if _under(m, layer)):
        got = loaded_by(m, graph)
        bad += [chain(got, n) for n in sorted(got) if any(_under(n, f) for f in FORBIDDEN[layer])]
    assert not bad, bad[:20]
