"""The Ray executor without a cluster (ablate/studies/launch/ray.py): what it refuses before
it submits, the dry run's sentence, its job ids and stop command. tests/test_ray.py runs it
on a real local cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.errors import InputError
from ablate.studies.launch import ray
from ablate.studies.launch.executor import RunResources
from ablate.studies.launch.profile import Profile


def _prof(**section: object) -> Profile:
    return Profile.model_validate({"executor": "ray", "ray": section})


def test_a_multi_node_run_and_a_missing_address_are_one_line_each(tmp_path, monkeypatch):
    run = [RunResources(tmp_path / "r")]
    with pytest.raises(InputError, match=r"^ray.nodes: 2: a Ray run is one job on one node"):
        ray.submit(run, tmp_path, _prof(nodes=2, address="http://127.0.0.1:1"), entry="x:y",
                   job_name="j")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(InputError, match=r"ray.address is not set and RAY_ADDRESS is empty"):
        ray.submit(run, tmp_path, _prof(), entry="x:y", job_name="j")
    assert not list(tmp_path.iterdir())


def test_the_address_comes_from_the_profile_else_ray_address(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8265")
    assert ray.address(_prof()) == "http://127.0.0.1:8265"
    assert ray.address(_prof(address="http://10.0.0.1:8265")) == "http://10.0.0.1:8265"


def test_the_dry_run_says_where_how_and_how_many_at_once():
    prof = _prof(address="http://127.0.0.1:8265", ranks_per_node=2, cpus_per_rank=3,
                 runs_at_once=4)
    cap = ray.capacity(prof)
    assert cap.runs_at_once == 4
    text = ray.sentence(ray.describe(prof, cap))
    assert text == (": a Ray job per run on the cluster at http://127.0.0.1:8265, 2 ranks under "
                    "torchrun with 0 GPUs and 6 CPUs; 4 at once (ray.runs_at_once), no time "
                    "limit")
    shape = ray.job_shape(prof)
    assert (shape.nodes, shape.ranks_per_node, shape.gpus_per_node) == (1, 2, 0)


def test_a_run_of_several_ranks_starts_under_torchrun():
    run = RunResources(Path("/shared/results/s/abc"))
    one = ray.entrypoint(run, _prof(python="/venv/bin/python"), "trainer:run")
    assert one == "/venv/bin/python -m ablate.studies.launch.ray_job /shared/results/s/abc trainer:run"
    two = ray.entrypoint(run, _prof(python="py", ranks_per_node=2, setup=["source v/bin/activate"]),
                         "trainer:run")
    assert two == ("source v/bin/activate && py -m torch.distributed.run --standalone --nnodes 1 "
                   "--nproc-per-node 2 -m ablate.studies.launch.ray_job /shared/results/s/abc "
                   "trainer:run")


def test_job_ids_name_their_cluster_and_stop_with_rays_own_command():
    ids = ["ray:s-2@http://127.0.0.1:8265", "ray:s-1@http://127.0.0.1:8265"]
    assert ray.stop_command(ids) == ("ray job stop --address http://127.0.0.1:8265 s-1 && "
                                     "ray job stop --address http://127.0.0.1:8265 s-2")
