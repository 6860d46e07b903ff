"""The study `ablate sweep --within` proposes, as a YAML file `ablate sweep` runs as is.

The file is the user's study with what the search chose (ablate/studies/sizing.py): its
`seeds`, `budget: {gpu_hours: ...}` and a new `name` (so its results do not mix with the
original's), the `--override`s the search ran with, and the same `base` and `profile` written
so they resolve from wherever the file is put: a file ablate ships by its bare name, any other
by its absolute path. When the profile would not run the proposal as it is (the executor that
sized it says, launch/executor.py GpuNodes: on Slurm, other nodes per run, or an
array_parallelism that would hold back the runs that fit), a copy of the profile with the
executor's keys set (Slurm: `slurm.nodes` and `slurm.array_parallelism`) is written beside it
and named by the study. Nothing is written over a file that is not an earlier proposal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import yaml

from ablate.number_text import count
from ablate import shipped
from ablate.errors import InputError
from ablate.studies.design import LoadedStudy
from ablate.studies.launch.executor import GpuNodes
from ablate.studies.launch.profile import Profile, find_profile
from ablate.adapters.builtin import find_recipe
from ablate.studies.sizing import Option, with_seeds
from ablate.studies.study_overrides import split_study_overrides
from ablate.yamlio import load_yaml

MARK = "# Proposed by `ablate sweep --within`"


def portable_ref(path: Path, kind: str) -> str:
    """A shipped file by its bare name (found from any folder), any other by absolute path."""
    home = shipped.shipped_dir(kind)  # type: ignore[arg-type]
    p = path.resolve()
    if home is not None and p.is_relative_to(home.resolve()):
        rel = p.relative_to(home.resolve()).as_posix()
        return rel[:-5] if kind == "sweeps" and rel.endswith(".yaml") else rel
    return str(p)


def cli_config_overrides(loaded: LoadedStudy) -> dict[str, Any]:
    """The `--override KEY=VALUE`s of TrainConfig keys, as dotted keys with the values the
    loader resolved (relative paths made absolute)."""
    _, rest = split_study_overrides(loaded.cli_overrides)
    out = {}
    for item in rest:
        keys = item.partition("=")[0].strip().split(".")
        node: Any = loaded.base_tree
        for k in keys:
            node = node.get(k) if isinstance(node, dict) else None
        out[".".join(keys)] = node
    return out


def profile_path(loaded: LoadedStudy, profile: Optional[str]) -> Optional[Path]:
    ref = profile or loaded.study.profile
    if not ref:
        return None
    return find_profile(ref, loaded.path.parent, "--profile" if profile else
                        loaded.doc.where(("profile",)))


def study_doc(loaded: LoadedStudy, opt: Option, name: str, profile_ref: Optional[str]) -> dict:
    """The proposal's study keys: the original's, with the search's choices."""
    data = dict(loaded.doc.data)
    data["name"] = name
    if loaded.study.base:
        data["base"] = portable_ref(find_recipe(loaded.study.base, loaded.path.parent,
                                                loaded.doc.where(("base",))), "recipes")
    over = {**(data.get("overrides") or {}), **cli_config_overrides(loaded)}
    if over:
        data["overrides"] = over
    data["seeds"] = with_seeds(opt, loaded.study.seeds)
    data["budget"] = {"gpu_hours": float(opt.budget)}
    if profile_ref:
        data["profile"] = profile_ref
    return data


def profile_doc(sizer: GpuNodes, path: Path, opt: Option) -> dict:
    """The profile's own keys with the proposal's nodes per run and runs at once, in the keys
    of the executor that sized it."""
    data = sizer.proposal_profile(dict(load_yaml(path).data or {}), opt.nodes_per_run,
                                  opt.cap.runs_at_once)
    Profile.model_validate(data)  # the copy is a valid profile
    return data


def _check_free(path: Path) -> None:
    if path.exists() and not path.read_text(errors="replace").startswith(MARK):
        raise InputError(f"{path}: exists and is not an earlier proposal; choose another --out")


def write_proposal(sizer: GpuNodes, loaded: LoadedStudy, opt: Option, out: Path, name: str,
                   header: list[str], profile: Optional[str],
                   dry: bool = False) -> tuple[str, Optional[str]]:
    """(study YAML text, profile YAML text or None), written to `out` (and `out`'s stem +
    `.profile.yaml`) unless `dry`; `name` the proposed study's, `sizer` the executor that
    sized it (sizing.check_sizable's). `header`: comment lines on what was chosen and why."""
    prof_path = profile_path(loaded, profile)
    prof_text, prof_ref = None, portable_ref(prof_path, "sweeps") if prof_path else None
    if prof_path is not None:
        base = Profile.model_validate(load_yaml(prof_path).data or {})
        if not sizer.keeps_proposal(base, opt.nodes_per_run, opt.cap.runs_at_once):
            prof_file = out.with_name(out.stem + ".profile.yaml")
            doc = profile_doc(sizer, prof_path, opt)
            prof_text = (f"{MARK}: the launch profile of {out.name}, from {prof_path} with "
                         f"{count(opt.nodes_per_run, 'node')} a run, {opt.cap.runs_at_once} at "
                         "once.\n" + yaml.safe_dump(doc, sort_keys=False))
            prof_ref = prof_file.name  # found next to the study (find_profile)
    text = "\n".join([MARK + ".", *(f"# {h}" for h in header), ""]) + yaml.safe_dump(
        study_doc(loaded, opt, name, prof_ref), sort_keys=False)
    if not dry:
        _check_free(out)
        if prof_text is not None:
            _check_free(out.with_name(out.stem + ".profile.yaml"))
            out.with_name(out.stem + ".profile.yaml").write_text(prof_text)
        out.write_text(text)
    return text, prof_text
