"""Any program: a command template with {overrides}, {seed}, {run_dir} and {resume}.

{overrides} is rendered as `--key value` words, Hydra `key=value` words, or the path of a
JSON file holding them (for tools that take a config file), as `override_style` says.
{resume} is the study's `resume:` text when the run dir holds an earlier attempt, else empty.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from ablate.adapters.base import TrainerSpec, argparse_args, hydra_args, nearest
from ablate.adapters.foreign import ForeignAdapter
from ablate.errors import InputError

PLACEHOLDERS = ("overrides", "seed", "run_dir", "resume")


class CommandAdapter(ForeignAdapter):
    kind = "command"
    default_log = "metrics.jsonl"

    def __init__(self, spec: TrainerSpec) -> None:
        if not spec.command:
            raise InputError("trainer: kind command needs `command:` (e.g. `python train.py "
                             "{overrides} --seed {seed} --out {run_dir} {resume}`)")
        self.spec = spec
        try:
            shlex.split(spec.command.format(**{p: "" for p in PLACEHOLDERS}))
        except (KeyError, IndexError, ValueError) as e:
            raise InputError(f"trainer.command: bad template ({e}); placeholders: "
                             f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}") from None

    @classmethod
    def from_spec(cls, spec: TrainerSpec) -> "CommandAdapter":
        return cls(spec)

    def check_key(self, key: str, where: str) -> None:
        keys = self.spec.keys
        if keys is not None and key not in keys:
            raise InputError(f"{where}: '{key}' is not a key of this command (trainer.keys) "
                             f"{nearest(key, keys)}")

    def check_overrides(self, overrides: dict[str, Any], where: str) -> None:
        for k in overrides:
            self.check_key(k, where)

    def steps_key(self) -> str:
        return "steps"

    def render(self, overrides: dict[str, Any], run_dir: Path) -> list[str]:
        style = self.spec.override_style
        if style == "hydra":
            return hydra_args(overrides)
        if style == "json":
            path = run_dir / "overrides.json"
            path.write_text(json.dumps(overrides, indent=1))
            return [str(path)]
        return argparse_args(overrides)

    def argv(self, overrides: dict[str, Any], seed: int, run_dir: Path, resume: bool) -> list[str]:
        # Placeholders become single marker words first, so a value with spaces stays one word.
        marks = {p: f"\x00{p}\x00" for p in PLACEHOLDERS}
        words = shlex.split(self.spec.command.format(**marks))
        fill = {"overrides": self.render(overrides, run_dir), "seed": [str(seed)],
                "run_dir": [str(run_dir)],
                "resume": shlex.split(self.spec.resume) if resume else []}
        out: list[str] = []
        for w in words:
            whole = [p for p in PLACEHOLDERS if w == marks[p]]
            if whole:
                out += fill[whole[0]]
            else:
                for p in PLACEHOLDERS:
                    w = w.replace(marks[p], " ".join(fill[p]))
                out.append(w)
        return out
