"""`ablate init`: a starter study in the user's own folder.

A new user has a folder and a pip-installed ablate, not this repository. The starter is the
quickstart (recipes/quickstart.yaml: a real question, answered in minutes on a laptop CPU),
written against the recipe and profile ablate ships (`base: proxy.yaml`, `profile: local`:
ablate/shipped.py finds them from any folder), with comments saying what to change.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from ablate.errors import InputError

STARTER = """\
# A study: which runs to train and how to compare them. Written by `ablate init`.
#   ablate sweep {file} --dry-run    # what would run, checked; nothing is started
#   ablate sweep {file} --wait       # train (here: 4 runs of a CPU proxy, minutes on a laptop)
#   ablate compare results/{name}    # the answer: the fitted ceiling A and efficiency B per variant
# `base:` and `profile:` name files ablate ships (`base: scalerl.yaml` for the paper's recipe
# at 8B scale; `profile: slurm` or `slurm_gpu` for a cluster); a file of that name next to this
# study, or sweeps/NAME.yaml for a profile, is used instead. `ablate schema` lists every key.
name: {name}
description: Rollout temperature 1.0 vs 0.3 on the CPU proxy, at equal compute (does sampling too cold lower the ceiling A?)
base: proxy.yaml              # a tiny char-level Llama on 2-digit addition (runs on a CPU)
overrides:
  engine.threads: 1           # two runs side by side on two cores
axes:                         # any dotted TrainConfig path, e.g. loss.aggregation: [sample, token]
  rollout.temperature: [1.0, 0.3]
mode: grid
seeds: [0, 1]
profile: local                # 2 runs at a time in the background on this machine
fit: {{x: flops, y: eval/pass_rate}}
"""


def starter_name(folder: Path) -> str:
    """A study name from the folder's name (letters, digits, '_', '-', '.'), else `study`."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", folder.resolve().name).strip("._-")
    return name or "study"


def write_starter(folder: Path, name: Optional[str] = None, file: str = "study.yaml") -> Path:
    """Write the starter study as `folder/file`; refuses to overwrite anything."""
    folder = Path(folder)
    path = folder / file
    if path.exists():
        raise InputError(f"{path}: already exists; ablate init never overwrites a file (pick "
                         "another folder, or --file NAME.yaml)")
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{folder}: not a folder")
    name = name or starter_name(folder)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or name in (".", ".."):
        raise InputError(f"--name {name}: a study name is letters, digits, '_', '-' and '.'")
    folder.mkdir(parents=True, exist_ok=True)
    with open(path, "x") as f:  # "x": a file that appeared meanwhile is not overwritten either
        f.write(STARTER.format(name=name, file=path))
    return path
