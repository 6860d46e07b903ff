"""The recipes and launch profiles ablate ships, and finding a file a study names by name.

A study says `base: scalerl.yaml` or `profile: slurm_gpu`; it may live in the repository, in
the user's own project, or anywhere. One rule finds what it names, for every kind of file:

  1. the path as given when it is absolute;
  2. relative to the folder of the file that names it (the study, or a recipe naming its base);
  3. relative to the current folder;
  4. the copy ablate ships (recipes/ and sweeps/ at the top of the repository, installed as the
     data packages `ablate.recipes` and `ablate.sweeps`: see setup.py).

So a user's own file of that name wins over the shipped one, and the shipped ones work from
any folder once ablate is pip-installed. When nothing matches, the error lists every place
looked at, each once, and the shipped names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Optional, Sequence

import yaml

from ablate.errors import InputError

Kind = Literal["recipes", "sweeps"]


def shipped_dir(kind: Kind) -> Optional[Path]:
    """Where the shipped files of `kind` are: the installed data package (`pip install`), else
    the source tree's top-level folder (a checkout on PYTHONPATH, or an editable install,
    whose `ablate` package sits next to recipes/ and sweeps/)."""
    here = Path(__file__).resolve().parent
    for d in (here / kind, here.parent / kind):
        if d.is_dir():
            return d
    return None


def shipped_names(kind: Kind, studies: bool = False) -> list[str]:
    """The shipped files of `kind` a study can name there, by name: recipes a `base:` can be
    (`scalerl.yaml`; not the example studies), profiles a `profile:` can be (`slurm_gpu.yaml`;
    not the tune spaces). `studies`: the example studies instead (`ablate sweep NAME`)."""
    d = shipped_dir(kind)
    if d is None:
        return []
    skip = ("name",) if kind == "recipes" else ("name", "base")
    out = []
    for p in sorted(d.rglob("*.yaml")):
        try:
            data = yaml.safe_load(p.read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(data, dict) and (not any(k in data for k in skip)) != studies:
            out.append(str(p.relative_to(d)))
    return out


def _unique(paths: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    seen: set[Path] = set()
    for p in paths:
        key = p.resolve()
        if key not in seen:
            seen.add(key)
            out.append(p)
    return out


def candidates(ref: str, kind: Kind, near: Optional[Path] = None,
               folders: Sequence[str] = ("",), cwd_folders: Sequence[str] = ("",)
               ) -> list[Path]:
    """Where `ref` may be, in order (each place once). `near`: the folder of the file naming it,
    searched in its `folders` (profiles: `sweeps`, `../sweeps`); then the current folder's
    `cwd_folders`. The shipped copy is tried last, under `ref` as written and without a leading
    `recipes/` or `sweeps/` (a repository path written in a study)."""
    p = Path(ref).expanduser()
    if p.is_absolute():
        return [p]
    places: list[Path] = [near / sub / p for sub in folders] if near is not None else []
    places += [Path.cwd() / sub / p for sub in cwd_folders]
    shipped = shipped_dir(kind)
    if shipped is not None:
        places.append(shipped / p)
        if p.parts and p.parts[0] == kind and len(p.parts) > 1:
            places.append(shipped / Path(*p.parts[1:]))
    return _unique([Path(os.path.normpath(q.absolute())) for q in places])


def find(ref: str, kind: Kind, near: Optional[Path] = None, folders: Sequence[str] = ("",),
         cwd_folders: Sequence[str] = ("",), what: str = "file", where: str = "",
         shown: Optional[str] = None, studies: bool = False) -> Path:
    """The first existing file among `candidates`; InputError listing them (and the shipped
    names) when none exists. `where` prefixes the message (`study.yaml:3`); `shown` is the name
    as the user wrote it (a profile's bare NAME) when `ref` is not."""
    looked = candidates(ref, kind, near, folders, cwd_folders)
    if not Path(ref).suffix:  # `base: proxy`, `ablate sweep loss_agg`: the file is NAME.yaml
        looked = _unique([*looked, *candidates(f"{ref}.yaml", kind, near, folders, cwd_folders)])
    for c in looked:
        if c.is_file():
            return Path(_short(c))  # as error messages then name it: relative when under here
    names = shipped_names(kind, studies)
    if kind == "sweeps":
        names = [n[:-5] for n in names if n.endswith(".yaml")]
    shipped = f"; shipped: {', '.join(names)}" if names else ""
    head = f"{where}: " if where else ""
    raise InputError(f"{head}{what} '{shown or ref}' not found (looked for "
                     f"{', '.join(_short(c) for c in looked)}){shipped}")


def _short(p: Path) -> str:
    """A path as the user can read it: relative to the current folder when under it."""
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def recipe_arg(path: Path, what: str, studies: bool = False) -> Path:
    """A command's recipe or study argument: the file as given when it exists, else a shipped
    recipe of that name (`ablate sweep loss_agg.yaml` or `recipes/loss_agg.yaml` from the
    user's own folder), else one line naming every place looked and the shipped names (the
    example studies when `studies`)."""
    return path if path.is_file() else find(str(path), "recipes", what=what, studies=studies)
