"""Every command at its width, as a user meets it: the installed console script, from a folder
outside the repository, at 80 and 100 columns and piped with no COLUMNS (100: the one rule in
ablate/cli/width.py). No line over the width; compare shows B (one of the two numbers it ranks
by) at every width; watch names each run's variant and seed beside its id (issue 52 point 2).
"""

from __future__ import annotations

import re

import pytest

from _cli import ablate_script
from _curves_util import curves_frame, write_study
import synthetic as sy

# a two-axis grid: labels shortened with a legend, the case that crowds a narrow table
TRUTHS = {"loss.aggregation=prompt,optimizer.lr=3e-6": sy.Truth(A=0.66, B=1.6, C_mid=0.01, R0=0.1),
          "loss.aggregation=sample,optimizer.lr=1e-5": sy.Truth(A=0.55, B=1.6, C_mid=0.01, R0=0.1)}
LABELS = {"run0000": "prompt, 3e-6", "run0001": "sample, 1e-5"}
WIDTHS = [(80, 80), (100, 100), (None, 100)]  # (COLUMNS, the width it means)


def _fits(out: str, width: int) -> list[str]:
    lines = out.splitlines()
    assert lines and max(len(x) for x in lines) <= width, [x for x in lines if len(x) > width]
    return lines


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    folder = tmp_path_factory.mktemp("user")
    return folder, write_study(folder, curves_frame(seeds=1, n_points=20, truths=TRUTHS))


@pytest.mark.slow
@pytest.mark.parametrize("columns,width", WIDTHS)
def test_compare_shows_b_and_watch_names_variant_and_seed_within_the_width(study, columns,
                                                                            width):
    folder, d = study
    r = ablate_script("compare", d.name, cwd=folder, columns=columns)
    assert r.returncode == 0, r.stderr
    lines = _fits(r.stdout, width)
    rule = next(i for i, x in enumerate(lines) if x.startswith("─"))
    header = " ".join(lines[rule - 2:rule])
    assert re.search(r"(^|\s)B( \[95%\])?(\s|$)", header), r.stdout  # a B column
    rows = [x for x in lines[rule + 1:] if re.match(r"\s+[12]\s", x)]
    assert len(rows) == 2 and all(re.search(r"\s\d\.\d+(\s|$)", x) for x in rows), r.stdout
    if width == 80:  # narrow: B's estimate alone, said under the table
        assert "without its interval at 80 columns" in " ".join(r.stdout.split()) or \
            "without their intervals at 80 columns" in " ".join(r.stdout.split()), r.stdout
    w = ablate_script("watch", d.name, cwd=folder, columns=columns)
    assert w.returncode == 0, w.stderr
    lines = _fits(w.stdout, width)
    for rid, label in LABELS.items():  # the id, the variant (shortened) and the seed
        assert any(x.startswith(f"{rid} {label} seed 0 ") for x in lines), w.stdout
    assert "loss.aggregation: prompt | sample" in w.stdout, w.stdout  # the legend


@pytest.mark.slow
@pytest.mark.parametrize("columns,width", [(80, 80), (None, 100)])
def test_the_dry_run_fits_the_width_and_piped_100(tmp_path, columns, width):
    """The GPU plan's paragraphs (500 characters on one line piped, before) fold at words;
    each run's row stays one line with its whole name."""
    r = ablate_script("sweep", "loss_agg.yaml", "--profile", "slurm_gpu", "--dry-run",
                      cwd=tmp_path, columns=columns)
    assert r.returncode == 0, r.stderr
    lines = _fits(r.stdout, width)
    rows = [x for x in lines if re.match(r"[0-9a-f]{12}  ", x)]
    assert len(rows) == 6 and all(x.endswith(("=sample", "=prompt", "=token")) for x in rows)
    assert not any(re.search(r"\w-$", x) for x in lines)  # nothing split mid-word
    assert f"not shown at {width} columns" in r.stdout, r.stdout
    assert list(tmp_path.iterdir()) == []
