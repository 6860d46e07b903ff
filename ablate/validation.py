"""User files as strict pydantic models: the base that refuses unknown keys, loading a YAML
file into a model, and the one-line error (file:line, key path, what is wrong, what is valid)
for the first thing pydantic refuses. Shared by the study, the search space and the launch
profile, so a typo reads the same in all three.
"""

from __future__ import annotations

import difflib
import typing
from pathlib import Path
from typing import Any, Callable, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ablate.errors import InputError
from ablate.yamlio import KeyPath, YamlDoc, load_yaml


class Strict(BaseModel):
    """Unknown keys are errors: a misspelt key that silently kept its default would run the
    wrong experiment."""

    model_config = ConfigDict(extra="forbid")


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside an annotation (unwrapping Optional), if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        m = model_of(arg)
        if m is not None:
            return m
    return None


def fields_at(model: type[BaseModel], keys: KeyPath) -> list[str] | None:
    """Field names of the (nested) model at `keys`, or None if `keys` is not a model."""
    for k in keys:
        f = model.model_fields.get(k)
        sub = model_of(f.annotation) if f is not None else None
        if sub is None:
            return None
        model = sub
    return list(model.model_fields)


def suggest(word: str, options: list[str]) -> str:
    """`(did you mean 'x'?)` or a short list of valid options."""
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f"(did you mean '{close[0]}'?)"
    shown = ", ".join(options[:12]) + (", ..." if len(options) > 12 else "")
    return f"(valid: {shown})"


def format_validation_error(
    err: ValidationError, where: Callable[[KeyPath], str], model: type[BaseModel], prefix: str = ""
) -> str:
    """One line for the first pydantic error: location, key path, problem, valid options."""
    e = err.errors(include_url=False)[0]
    loc = tuple(str(x) for x in e["loc"])
    dotted = prefix + ".".join(loc)
    if e["type"] == "extra_forbidden":
        names = fields_at(model, loc[:-1]) or []
        return f"{where(loc)}: unknown key '{dotted}' {suggest(loc[-1], names)}"
    if e["type"] == "missing":
        return f"{where(loc)}: missing required key '{dotted}'"
    got = e.get("input")
    got_s = repr(got)
    if len(got_s) > 60:
        got_s = got_s[:57] + "..."
    msg = e["msg"].removeprefix("Value error, ")
    return f"{where(loc)}: {dotted or '<root>'}: {msg} (got {got_s})"


M = TypeVar("M", bound=BaseModel)


def load_model(path: Path, model: type[M], what: str) -> tuple[M, YamlDoc]:
    """Strict-load a YAML file and validate it as `model`; errors name file, line and key."""
    return validate_model(load_yaml(path), model, what)


def validate_model(doc: YamlDoc, model: type[M], what: str) -> tuple[M, YamlDoc]:
    """`load_model` on an already parsed file."""
    path = doc.path
    if not isinstance(doc.data, dict):
        raise InputError(f"{path}:1: {what}")
    try:
        return model.model_validate(doc.data), doc
    except ValidationError as err:
        raise InputError(format_validation_error(err, doc.where, model)) from None
