"""Layers import one way, read from the source (function-local imports included, TYPE_CHECKING
ones left out: tests/test_layers.py's graph): the CLI on top, then studies (plan, submit,
wait), then analysis, with ablate/studydir.py at the bottom so every layer reads a study dir
through one owner."""

from __future__ import annotations

import pytest
from test_layers import imported_names, module_files

# importer prefix -> prefixes it must never import
FORBIDDEN = {
    "ablate.analysis": ("ablate.studies", "ablate.cli"),
    "ablate.studies": ("ablate.cli",),
    "ablate.studydir": ("ablate.studies", "ablate.cli", "ablate.analysis", "ablate.adapters"),
}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_nothing_above_it(layer):
    mods = module_files()
    assert any(_under(m, layer) for m in mods), f"no module under {layer}"
    bad = sorted(f"{m} imports {n}" for m, p in mods.items() if _under(m, layer)
                 for n in imported_names(m, p) if any(_under(n, f) for f in FORBIDDEN[layer]))
    assert not bad, bad
