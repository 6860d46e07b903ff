"""`ablate init`: write a starter study in the user's own folder (ablate/studies/starter.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ablate.cli.app import app


@app.command()
def init(
    folder: Path = typer.Argument(Path("."), help="Folder to write the study in (created if "
                                  "missing)."),
    name: Optional[str] = typer.Option(None, "--name", help="Study name (results/NAME); "
                                       "default: the folder's name."),
    file: str = typer.Option("study.yaml", "--file", help="File name of the study."),
) -> None:
    """Write a starter study (the CPU quickstart, on the recipe and profile ablate ships) in
    FOLDER; never overwrites. Then: ablate sweep FOLDER/study.yaml --dry-run."""
    from ablate.studies.starter import write_starter

    from ablate.cli.width import columns, fold

    path = write_starter(folder, name, file)
    print("\n".join(fold([f"wrote {path}: a study of 4 CPU-proxy runs (base: proxy.yaml and "
                          "profile: local, shipped with ablate)",
                          f"next: ablate sweep {path} --dry-run   (then: ablate sweep {path} "
                          "--wait)"], columns())))
