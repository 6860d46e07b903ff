"""The default vLLM engines (rollout.vllm.tensor_parallel_size None): the smallest
tensor-parallel size whose engine holds the model, chosen by one function
(trainer/plan/engine_fit.py tensor_parallel) for the dry run's plan (the profile's GPU
size) and for the trainer's start-up (trainer/dist/binding.py bind_devices, the GPU size from
ABLATE_GPU_MEMORY_GIB or nvidia-smi, never CUDA). Checked for every process of the paper's
2-node x 8-GPU job: the plan and the start-up name the same engines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from trainer.dist.binding import GPU_MEMORY, bind_devices, gpu_memory_gib
from _trainer_util import set_dotted

from trainer.config import TrainConfig
from trainer.plan.engine_fit import tensor_parallel
from trainer.plan.model_shape import model_shape
from trainer.plan.memory import VLLM_UTILIZATION, kv_room
from trainer.plan.memory import plan as memory_plan
from trainer.plan.topology import JobShape, topology

ROOT = Path(__file__).resolve().parents[1]
# A 70B-class dense shape (Llama-3-70B's config.json fields): 141 GB of bf16 weights.
BIG = {"num_hidden_layers": 80, "hidden_size": 8192, "num_attention_heads": 64,
       "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 28672,
       "vocab_size": 128256, "tie_word_embeddings": False}


def paper(**over) -> TrainConfig:
    """recipes/scalerl.yaml as written (Qwen/Qwen3-8B, pipeline mode, vLLM), with `over`."""
    tree = yaml.safe_load((ROOT / "recipes" / "scalerl.yaml").read_text())
    return TrainConfig.model_validate(set_dotted(tree, over))


def big_model(tmp_path) -> str:
    (tmp_path / "config.json").write_text(json.dumps(BIG))
    return str(tmp_path)


def started_engines(c: TrainConfig, gib) -> list:
    """bind_devices for every task of a 2-node x 4-task job on 8-GPU nodes, the GPU size as
    the launcher would name it: each process's engines."""
    out = []
    for node in range(2):
        for local in range(4):
            env = {"SLURM_PROCID": str(node * 4 + local), "SLURM_LOCALID": str(local),
                   "SLURM_NODEID": str(node), "SLURM_NTASKS": "8",
                   "SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "gpu[01-02]",
                   "SLURM_JOB_ID": "4242", "CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7",
                   GPU_MEMORY: "" if gib is None else str(gib)}
            b = bind_devices(c, env)
            assert env[GPU_MEMORY] == ("" if gib is None else f"{gib:g}")  # recorded
            assert bind_devices(c, dict(env)) == b  # a second call chooses the same
            out.append(b.engines)
    return out


def shape(gib) -> JobShape:
    return JobShape(nodes=2, ranks_per_node=4, gpus_per_node=8, gpu_memory_gib=gib)


def test_paper_recipe_on_80_gib_gpus_is_four_one_gpu_replicas_in_plan_and_start_up():
    c = paper()
    e = topology(c, shape(80))
    assert (e.tp, len(e.engines), e.own_gpus, e.engine_nodes) == (1, 4, True, 2)  # each node its own
    started = started_engines(c, 80)
    assert started == [(("0",), ("1",), ("2",), ("3",)), (), (), ()] * 2
    assert started[0] == tuple(tuple(str(g) for g in eng) for eng in e.engines)
    p = memory_plan(c, shape(80))
    assert p.fits and "4 vLLM engines of 1 GPU each on every node (2 nodes, 8 in all)" in p.note
    assert "idle" not in p.note, p.note  # every node's generation GPUs run its engines


def test_a_model_too_large_for_one_gpu_gets_the_smallest_tp_that_holds_it(tmp_path):
    c = paper(model__name_or_path=big_model(tmp_path))
    m = model_shape(c.model.name_or_path)[0]
    # the rule, by hand: tp=1 has no KV room for one full-length sequence, tp=2 has
    assert kv_room(c, m, 1, 80, VLLM_UTILIZATION) == 0
    assert kv_room(c, m, 2, 80, VLLM_UTILIZATION) >= 1
    e = topology(c, shape(80))
    assert (e.tp, len(e.engines)) == (2, 2)
    assert started_engines(c, 80) == [(("0", "1"), ("2", "3")), (), (), ()] * 2
    # 40 GiB GPUs: only all four generation GPUs hold it
    assert kv_room(c, m, 2, 40, VLLM_UTILIZATION) == 0
    assert (topology(c, shape(40)).tp, len(topology(c, shape(40)).engines)) == (4, 1)
    assert started_engines(c, 40)[0] == (("0", "1", "2", "3"),)


def test_no_divisor_fits_plans_the_largest_engine_and_says_it_does_not_fit(tmp_path):
    c = paper(model__name_or_path=big_model(tmp_path))
    assert tensor_parallel(c, 4, 24) is None
    e = topology(c, shape(24))
    assert (e.tp, len(e.engines)) == (4, 1)
    assert started_engines(c, 24)[0] == (("0", "1", "2", "3"),)
    p = memory_plan(c, shape(24))
    assert not p.fits and "KV room for 0 " in p.kv_sequences, p.kv_sequences


def test_explicit_size_is_honoured_and_unknown_gpu_size_keeps_one_engine():
    c = paper(rollout__vllm__tensor_parallel_size=2)
    assert (topology(c, shape(80)).tp, len(topology(c, shape(80)).engines)) == (2, 2)
    assert started_engines(c, 80)[0] == (("0", "1"), ("2", "3"))
    # GPU size unknown (no profile size; no nvidia-smi, ABLATE_GPU_MEMORY_GIB ""): as before
    assert (topology(paper(), shape(None)).tp, len(topology(paper(), shape(None)).engines)) == (4, 1)
    assert started_engines(paper(), None)[0] == (("0", "1", "2", "3"),)


def test_gpu_size_at_start_up_comes_from_the_environment_or_is_refused_in_one_line():
    assert gpu_memory_gib({GPU_MEMORY: "79.6"}, ("0",)) == pytest.approx(79.6)
    assert gpu_memory_gib({GPU_MEMORY: "80"}, ()) is None  # CPU: no GPUs, no size
    assert gpu_memory_gib({GPU_MEMORY: ""}, ("0",)) is None
    with pytest.raises(ValueError, match="ABLATE_GPU_MEMORY_GIB='eighty'"):
        gpu_memory_gib({GPU_MEMORY: "eighty"}, ("0",))
