"""Models and datasets from the Hugging Face hub or local paths, with one-line errors.

Why its own module: a job on a compute node usually has no network, so the weights and the
data must already sit in a local folder or in an HF cache filled beforehand. When they do not,
transformers and datasets fail several frames deep with messages about connections; a study
job should instead stop at start with one line that names the id and says how to fill the
cache. Everything here raises `AssetUnavailable` (a RuntimeError) for that case, `from None`
so the job log does not bury the line under a library traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

# Table files task.path may name directly (read with pandas, no `datasets` needed).
TABLE_SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


class AssetUnavailable(RuntimeError):
    """A model or dataset that cannot be loaded here (missing local path, wrong id, no cache)."""


def _reason(err: BaseException) -> str:
    first = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return first if len(first) <= 160 else first[:157] + "..."


def _looks_local(spec: str) -> bool:
    """A path, not a hub id: absolute, relative with ./ or ../, ~, or an existing path.
    Hub ids are `name` or `org/name` (one slash at most)."""
    return (spec.startswith(("/", "./", "../", "~")) or spec.count("/") > 1
            or Path(spec).expanduser().exists())


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def load_pretrained(name_or_path: str, dtype=None):
    """(model, tokenizer) of a causal LM from a local dir or a hub id (via the HF cache)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if _looks_local(name_or_path):
        p = Path(name_or_path).expanduser()
        if not (p / "config.json").is_file():
            what = "does not exist" if not p.exists() else "has no config.json"
            raise AssetUnavailable(
                f"model.name_or_path: local model dir '{name_or_path}' {what}; point it at a "
                "folder written by save_pretrained (config.json, weights, tokenizer) that every "
                "compute node can read") from None
        name_or_path = str(p)
    try:
        tok = AutoTokenizer.from_pretrained(name_or_path)
        model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype)
    except (OSError, ValueError) as e:  # missing files, no network, unknown id, gated repo
        raise AssetUnavailable(
            f"model.name_or_path: cannot load '{name_or_path}' ({_reason(e)}); "
            + _model_hint(name_or_path)) from None
    return model, tok


def _model_hint(name: str) -> str:
    where = ("HF_HUB_OFFLINE=1 is set, so only the local HF cache is read; "
             if _offline() else "")
    return (f"{where}pre-fill the cache on a machine with network: `hf download {name}` "
            "(or huggingface-cli download) with HF_HOME on storage the compute nodes share, "
            "or set model.name_or_path to a local directory")


def load_table(spec: str) -> pd.DataFrame:
    """Rows of a local table file (.jsonl/.json/.parquet/.csv), a local `datasets` folder
    (save_to_disk) or parquet/jsonl folder, or an HF dataset id `org/name[:split]`."""
    p = Path(spec).expanduser()
    if p.suffix in TABLE_SUFFIXES or p.is_file():
        if not p.is_file():
            raise AssetUnavailable(f"task.path: file '{spec}' does not exist") from None
        return _read_file(p)
    if p.is_dir():
        return _read_dir(p, spec)
    if _looks_local(spec):
        raise AssetUnavailable(f"task.path: '{spec}' does not exist (a local file/folder, or "
                               "an HF dataset id org/name[:split])") from None
    return _read_hub(spec)


def _read_file(p: Path) -> pd.DataFrame:
    try:
        if p.suffix == ".parquet":
            return pd.read_parquet(p)
        if p.suffix == ".csv":
            return pd.read_csv(p)
        if p.suffix == ".json":
            try:
                return pd.read_json(p)
            except ValueError:
                return pd.read_json(p, lines=True)
        return pd.read_json(p, lines=True)
    except (OSError, ValueError) as e:
        raise AssetUnavailable(f"task.path: cannot read '{p}' ({_reason(e)})") from None


def _read_dir(p: Path, spec: str) -> pd.DataFrame:
    if (p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists():
        import datasets

        ds = datasets.load_from_disk(str(p))
        if isinstance(ds, datasets.DatasetDict):
            ds = ds["train"] if "train" in ds else next(iter(ds.values()))
        return ds.to_pandas()
    files = sorted(f for f in p.rglob("*") if f.suffix in TABLE_SUFFIXES and f.is_file())
    if not files:
        raise AssetUnavailable(f"task.path: folder '{spec}' holds no .jsonl/.json/.parquet/.csv "
                               "file and is not a datasets save_to_disk folder") from None
    return pd.concat([_read_file(f) for f in files], ignore_index=True)


def _read_hub(spec: str) -> pd.DataFrame:
    import datasets

    name, _, split = spec.partition(":")
    split = split or "train"
    try:
        ds = datasets.load_dataset(name, split=split)
    except Exception as e:  # noqa: BLE001 - datasets raises many unrelated types for "not here"
        where = ("HF_HUB_OFFLINE=1 is set, so only the local HF cache is read; "
                 if _offline() else "")
        raise AssetUnavailable(
            f"task.path: cannot load HF dataset '{name}' split '{split}' ({_reason(e)}); {where}"
            f"pre-fill the cache on a machine with network: `python -c \"import datasets; "
            f"datasets.load_dataset('{name}', split='{split}')\"` with HF_HOME on shared "
            "storage, or save it as a .jsonl/.parquet file and set task.path to it") from None
    return ds.to_pandas()
