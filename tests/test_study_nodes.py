"""The nodes a study can use and its wall time from them (issue 40): `sinfo` parsed on captured
text (ablate/studies/launch/slurm_nodes.py), the study line of the dry run, and one live check
against the test cluster (marked slurm; it never starts or stops the cluster)."""

from __future__ import annotations

import os

import pytest
from _cli import ablate

from ablate.studies.capacity import capacity, study_wall_h, wall_text
from ablate.studies.launch.profile import Profile
from ablate.studies.launch.slurm_nodes import (
    SINFO_ARGS,
    ask_sinfo,
    node_usable,
    nodes_capacity,
    parse_sinfo,
)

# Captured from this project's test cluster (slurm-wlm 22.05.8), `sinfo --noheader --Node
# --format=%N|%P|%a|%T`: one node in the default partition.
TEST_CLUSTER = "localhost|debug*|up|idle\n"

# A GPU cluster as the same command prints it: node-oriented, one line per (node, partition),
# so a node in two partitions appears twice; states as Slurm's node_state_string() writes them
# (src/common/slurm_protocol_defs.c), lower-cased by sinfo: a base word and at most one suffix.
# A multi-cluster sinfo (-M, SLURM_CLUSTERS) heads each cluster with a `CLUSTER:` line.
GPU_CLUSTER = """\
CLUSTER: lab
gpu001|gpu|up|mixed
gpu002|gpu|up|allocated
gpu003|gpu|up|allocated+
gpu004|gpu|up|idle
gpu005|gpu|up|idle~
gpu006|gpu|up|drained
gpu007|gpu|up|draining
gpu008|gpu|up|down*
gpu009|gpu|up|mixed-
gpu010|gpu|up|idle*
gpu011|gpu|up|reserved
gpu012|gpu|up|maint
gpu013|gpu|up|idle@
gpu014|gpu|up|planned
gpu001|long|up|mixed
gpu002|long|up|allocated
cpu001|cpu*|up|idle
cpu002|cpu*|up|mixed
"""


def test_test_cluster_capture_is_one_usable_node_in_the_default_partition():
    got = parse_sinfo(TEST_CLUSTER, None)
    assert got is not None and (got.partition, got.total, got.usable) == ("debug", 1, 1), got
    assert parse_sinfo(TEST_CLUSTER, "debug").usable == 1
    assert parse_sinfo(TEST_CLUSTER, "gpu") is None  # the shipped profile's partition


def test_gpu_partition_counts_what_takes_jobs():
    got = parse_sinfo(GPU_CLUSTER, "gpu")
    # usable: mixed, allocated, allocated+ (completing), idle, idle~ (powered off, resumed on
    # demand), mixed- (planned), idle@ (reboot pending), planned; not: drained, draining,
    # down*, idle* (not responding), reserved, maint
    assert (got.total, got.usable) == (14, 8), got
    assert got.by_state["drained"] == 1 and got.by_state["down*"] == 1
    text = got.text()
    assert text.startswith("14 nodes, 8 usable (") and "1 drained" in text, text
    assert "idle~" not in text  # usable states are not listed as held
    assert parse_sinfo(GPU_CLUSTER, "long").total == 2  # a node in two partitions: each
    assert parse_sinfo(GPU_CLUSTER, None).partition == "cpu"  # the `*` one
    assert parse_sinfo(GPU_CLUSTER, "nope") is None


@pytest.mark.parametrize("state,usable", [
    ("idle", True), ("mixed", True), ("allocated+", True), ("idle~", True), ("idle#", True),
    ("mixed-", True), ("completing", True), ("idle%", True), ("IDLE", True),
    ("down", False), ("down~", False), ("drained*", False), ("draining@", False),
    ("fail", False), ("failing", False), ("inval", False), ("future", False),
    ("unknown*", False), ("idle*", False), ("mixed$", False), ("maint", False), ("", False)])
def test_node_states(state, usable):
    assert node_usable(state) is usable


def test_a_down_partition_has_no_usable_node_and_odd_lines_are_skipped():
    text = "gpu01|gpu|down|idle\ngpu02|gpu|down|idle\n\nnot a line\nPARTITION AVAIL\n"
    got = parse_sinfo(text, "gpu")
    assert (got.total, got.usable) == (2, 0) and "the partition is down" in got.text()
    # a federation may print the cluster first: the last four fields are read
    assert parse_sinfo("fed1|gpu01|gpu|up|idle\n", "gpu").usable == 1


def test_study_wall_time_waits_for_free_slots():
    assert study_wall_h([10.0] * 6, 1) == 60.0
    assert study_wall_h([10.0] * 6, 4) == 20.0  # two waves
    assert study_wall_h([30.0, 10.0, 10.0, 10.0], 2) == 30.0  # longest first
    assert study_wall_h([10.0], 0) is None
    assert wall_text(6855.0) == "~6,855 h wall (286 days, ~9.4 months)"
    assert wall_text(72.0) == "~72 h wall (3.0 days)"


def test_profile_study_nodes_wins_over_sinfo_and_array_parallelism_caps():
    prof = Profile.model_validate({"executor": "slurm", "slurm": {
        "nodes": 2, "gpus_per_node": 8, "array_parallelism": 3, "study_nodes": 16}})
    cap = capacity("slurm", prof)
    assert (cap.runs_at_once, cap.nodes.source, cap.array_cap) == (3, "slurm.study_nodes", 3)
    assert "capped by slurm.array_parallelism 3" in cap.text(), cap.text()
    assert nodes_capacity(prof, nodes_per_run=4, array_cap=None).runs_at_once == 4
    small = prof.model_copy(update={"slurm": prof.slurm.model_copy(update={"study_nodes": 1})})
    assert capacity("slurm", small).runs_at_once == 0
    assert capacity("slurm", small).text().startswith("no run can start: 2-node runs on 1 node")


def test_dry_run_states_the_study_wall_time_on_the_nodes_it_has(tmp_path):
    """The paper study on slurm_gpu: 6 runs of 2 nodes; without `sinfo` knowing partition gpu
    the dry run assumes the profile's 2 nodes (one run at a time) and says so."""
    r = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm_gpu", "--dry-run")
    assert r.returncode == 0, r
    # the last fact, folded at the width's words (COLUMNS 100), read as one line
    line = " ".join(r.stdout[r.stdout.rindex("\nstudy: ") + 1:].split())
    assert line.startswith("study: 6 planned runs") and "1 at once: 2-node runs on assumed " \
        "2 nodes (the profile's; " in line, line
    # one run at a time: the runs' own plans end to end
    runs = __import__("json").loads(ablate("sweep", "recipes/loss_agg.yaml", "--profile",
                                           "slurm_gpu", "--dry-run", "--json").stdout)
    total = sum(run["resources"]["wall_h"] for run in runs)
    assert f"~{total:,.0f} h wall ({total / 24:.0f} days" in line, (line, total)
    prof = tmp_path / "eight.yaml"
    prof.write_text("executor: slurm\ngpu_memory_gib: 80\ngpu_model: h100\nslurm:\n"
                    "  partition: gpu\n  nodes: 2\n  tasks_per_node: 4\n  gpus_per_node: 8\n"
                    "  time_min: 240\n  signal_delay_s: 300\n  array_parallelism: 4\n"
                    "  study_nodes: 8\n")
    r = ablate("sweep", "recipes/loss_agg.yaml", "--profile", str(prof), "--dry-run", "--json")
    launch = __import__("json").loads(r.stdout)[0]["launch"]
    assert (launch["runs_at_once"], launch["study_nodes"], launch["study_nodes_from"]) == \
        (4, 8, "slurm.study_nodes"), launch


@pytest.mark.slurm
def test_live_sinfo_of_the_test_cluster_parses():
    """The parser on what this cluster's `sinfo` prints now (the cluster is only read)."""
    if os.environ.get("ABLATE_TEST_SLURM") != "1":
        pytest.skip("ABLATE_TEST_SLURM=1 runs the Slurm tests (tests/slurm/cluster.sh)")
    import subprocess

    r = subprocess.run(list(SINFO_ARGS), capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        pytest.skip(f"sinfo does not answer: {r.stderr.strip()[:200]}")
    default = parse_sinfo(r.stdout, None)
    assert default is not None and default.total >= 1, r.stdout
    ask_sinfo.cache_clear()
    found, why = ask_sinfo(default.partition)
    assert found is not None and found.total == default.total and why == "", (found, why)
