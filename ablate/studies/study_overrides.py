"""`ablate sweep --override` for keys of the study itself, not of the TrainConfig.

Only `seeds` for now: a rehearsal or a quick look at a study runs one seed of it
(`--override seeds=[0]`) without copying the file. Run ids hash the config and the seed, so
the runs of `seeds=[0]` are the same runs as the seed-0 runs of the full study: a later sweep
without the override adds the missing seeds and skips the ones already done.
"""

from __future__ import annotations

from typing import Any, Sequence

import yaml
from pydantic import ValidationError

from ablate.errors import InputError

# Study keys `--override` may set (a study key has no dot; TrainConfig keys are dotted paths).
STUDY_KEYS = ("seeds",)


def split_study_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """(study-key items, TrainConfig items), each in the order given."""
    mine = [o for o in overrides if o.partition("=")[0].strip() in STUDY_KEYS]
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
