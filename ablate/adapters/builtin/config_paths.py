"""TrainConfig paths: which dotted keys exist (what axes and overrides may set), and the
nearest valid key for one that does not."""

from __future__ import annotations

from pydantic import BaseModel

from ablate.errors import InputError
from ablate.validation import fields_at, model_of, suggest
from trainer.config import TrainConfig


def leaf_paths(model: type[BaseModel] = TrainConfig, prefix: str = "") -> list[str]:
    """Every dotted path to a non-model field (what axes may vary)."""
    out: list[str] = []
    for name, f in model.model_fields.items():
        sub = model_of(f.annotation)
        if sub is not None:
            out.extend(leaf_paths(sub, f"{prefix}{name}."))
        else:
            out.append(prefix + name)
    return out


def check_config_path(dotted: str, where: str, what: str) -> None:
    """Refuse a dotted path that is not a TrainConfig field, suggesting the nearest one."""
    keys = tuple(dotted.split("."))
    for i, k in enumerate(keys):
        names = fields_at(TrainConfig, keys[:i])
        if names is None:  # descended into a leaf (e.g. a list): the rest is not addressable
            raise InputError(
                f"{where}: {what} '{dotted}': '{'.'.join(keys[:i])}' is a value, not a section"
            )
        if k not in names:
            full = [p for p in leaf_paths() if p.count(".") == len(keys) - 1] or leaf_paths()
            hint = suggest(dotted, full) if "(did" in suggest(dotted, full) else suggest(k, names)
            raise InputError(f"{where}: {what} '{dotted}' is not a TrainConfig path {hint}")
