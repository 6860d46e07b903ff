"""A value as one short, stable word: in a variant's name (`loss.eps_max=8`, `...=true`) and on
another trainer's command line (`--beta 0.0`, `key=[1,2]`). One rule for both, so the name a
study shows and the word its run gets are written the same way."""

from __future__ import annotations

import json
from typing import Any


def value_text(v: Any) -> str:
    """true/false, null, JSON (keys sorted, no spaces) for lists and mappings, else str()."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (list, dict)):
        return json.dumps(v, separators=(",", ":"), sort_keys=True)
    return str(v)
