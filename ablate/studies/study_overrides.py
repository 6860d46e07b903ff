"""`ablate sweep --override` for keys of the study itself, not of the TrainConfig.

`seeds` and `axes.KEY`: a rehearsal or a quick look at a study runs one seed of it
(`--override seeds=[0]`) or some values of an axis (`--override 'axes.loss.aggregation=[prompt,
token]'`) without copying the file. Run ids hash the config and the seed, so those runs are the
same runs as the full study's: a later sweep without the override adds the missing ones and
skips the ones already done.
"""

from __future__ import annotations

from typing import Any, Sequence

import yaml
from pydantic import ValidationError

from ablate.errors import InputError

# Study keys `--override` may set (TrainConfig keys are the other dotted paths).
STUDY_KEYS = ("seeds",)
AXES = "axes."  # `axes.KEY=[...]`: the values of one of the study's axes


def _is_study_key(item: str) -> bool:
    key = item.partition("=")[0].strip()
    return key in STUDY_KEYS or key.startswith(AXES)


def split_study_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """(study-key items, TrainConfig items), each in the order given."""
    mine = [o for o in overrides if _is_study_key(o)]
    return mine, [o for o in overrides if o not in mine]


def apply_study_overrides(study: Any, items: Sequence[str]) -> Any:
    """A copy of `study` (a validated Study) with each `KEY=VALUE` item set, validated by the
    Study model itself (so `seeds=[0, 0]` is refused as in the file); one-line InputError."""
    for item in items:
        key, _, raw = item.partition("=")
        key, where = key.strip(), f"--override {item}"
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError as e:
            raise InputError(f"{where}: value is not valid YAML ({str(e).splitlines()[0]})") from None
        if key.startswith(AXES):
            study = _set_axis(study, key.removeprefix(AXES), value, where)
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            value = [value]  # `seeds=3` means one seed, 3
        try:
            study = type(study).model_validate({**study.model_dump(exclude_unset=True), key: value})
        except ValidationError as err:
            e = err.errors(include_url=False)[0]
            msg = e["msg"].removeprefix("Value error, ")
            raise InputError(f"{where}: {key}: {msg} (got {value!r}); expected a list of distinct "
                             "integers, e.g. --override seeds=[0]") from None
    return study


def _set_axis(study: Any, axis: str, values: Any, where: str) -> Any:
    """`study` with the axis `axis` taking `values` (a non-empty list), validated as in a file."""
    if axis not in study.axes:
        have = ", ".join(sorted(study.axes)) or "none"
        raise InputError(f"{where}: the study has no axis {axis!r} (its axes: {have})")
    if not isinstance(values, list) or not values:
        raise InputError(f"{where}: expected a non-empty list of values, e.g. "
                         f"--override 'axes.{axis}=[{', '.join(map(str, study.axes[axis][:2]))}]'")
    try:
        return type(study).model_validate({**study.model_dump(exclude_unset=True),
                                           "axes": {**study.axes, axis: values}})
    except ValidationError as err:
        e = err.errors(include_url=False)[0]
        raise InputError(f"{where}: {e['msg'].removeprefix('Value error, ')}") from None
