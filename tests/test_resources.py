"""The GPU memory plan (trainer/plan/memory.py): its formulas against hand counts and real models,
and what `ablate sweep` does with it (the paper recipe fits 80 GiB GPUs; without ZeRO it does
not, and the sweep refuses it in one line unless --force)."""

from __future__ import annotations

import json

import pytest
from test_validate_all import ablate

from _trainer_util import set_dotted

from trainer.config import TrainConfig
from trainer.plan.memory import (GIB, MAX_LOGITS_PER_CHUNK, KNOWN, ModelShape, activation_terms,
                               model_shape, model_state_terms, plan, tokens_per_forward)
from trainer.validate import JobShape

QWEN3_8B = ModelShape(**KNOWN["Qwen/Qwen3-8B"], source="test")


def test_chunk_size_is_the_trainers():
    from trainer.models.logprobs import MAX_LOGITS_PER_CHUNK as trainer_chunk

    assert MAX_LOGITS_PER_CHUNK == trainer_chunk


@pytest.mark.slow  # its first case builds and saves a model, transformers' and deepspeed's
# first imports in it: 1.7-2.2 s of CPU, too near the fast tier's 2-s limit (issue 52 point 7)
@pytest.mark.parametrize("tied, kv", [(True, 2), (False, 1), (True, 4)])
def test_parameter_count_equals_a_real_model_built_from_the_same_config(tmp_path, tied, kv):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=176, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=kv, tie_word_embeddings=tied)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(tmp_path)
    shape, why = model_shape(str(tmp_path))  # read from the saved config.json
    assert why == "" and shape.source.endswith("config.json")
    assert shape.params == sum(p.numel() for p in model.parameters())


def test_known_shapes_match_published_sizes():
    # Model cards: Qwen3-8B 8.2B parameters; Qwen2.5-0.5B 0.49B; Qwen2.5-7B 7.61B.
    assert QWEN3_8B.params / 1e9 == pytest.approx(8.19, abs=0.02)
    assert ModelShape(**KNOWN["Qwen/Qwen2.5-0.5B"], source="").params / 1e9 == pytest.approx(0.49, abs=0.01)
    assert ModelShape(**KNOWN["Qwen/Qwen2.5-7B"], source="").params / 1e9 == pytest.approx(7.61, abs=0.02)


@pytest.mark.parametrize("stage, w, g, o", [(0, 2, 2, 12), (1, 2, 2, 12 / 8), (2, 2, 2 / 8, 12 / 8),
                                            (3, 2 / 8, 2 / 8, 12 / 8)])
def test_zero_stages_follow_the_papers_2_2_12_accounting(stage, w, g, o):
    c = TrainConfig.model_validate({"engine": {"type": "deepspeed", "zero_stage": stage}})
    terms = model_state_terms(c, QWEN3_8B, dp=8)
    psi = QWEN3_8B.params
    assert terms["weights"] == pytest.approx(w * psi)
    assert terms["gradients"] == pytest.approx(g * psi)
    assert terms["optimizer states"] == pytest.approx(o * psi)
    assert ("ZeRO-3 gathered layers + head" in terms) == (stage == 3)


def test_torch_engine_keeps_fp32_states_whole():
    terms = model_state_terms(TrainConfig(), QWEN3_8B, dp=8)  # engine.type torch
    assert [terms[k] / QWEN3_8B.params for k in ("weights", "gradients", "optimizer states")] == [4, 4, 8]


def test_activations_follow_micro_batch_tokens_and_checkpointing():
    base = {"model": {"name_or_path": "Qwen/Qwen3-8B"}, "rollout": {"max_new_tokens": 4096},
            "length": {"control": "none"}}
    small = TrainConfig.model_validate({**base, "engine": {"micro_batch_tokens": 8192}})
    big = TrainConfig.model_validate({**base, "engine": {"micro_batch_tokens": 16384}})
    t_small, t_big = tokens_per_forward(small, 8), tokens_per_forward(big, 8)
    assert (t_small, t_big) == (8192, 16384)
    a_small, a_big = (sum(activation_terms(c, QWEN3_8B, t).values()) for c, t in
                      ((small, t_small), (big, t_big)))
    assert a_big == pytest.approx(2 * a_small)  # linear in tokens (no s^2 term under SDPA)
    ckpt = TrainConfig.model_validate({**base, "model": {**base["model"], "gradient_checkpointing": True}})
    full = sum(activation_terms(big, QWEN3_8B, t_big).values())
    assert sum(activation_terms(ckpt, QWEN3_8B, t_big).values()) < full / 5
    # A sample is never split: a micro-batch holds at least one full-length sample.
    tiny = TrainConfig.model_validate({**base, "engine": {"micro_batch_tokens": 100}})
    assert tokens_per_forward(tiny, 8) == 2048 + 4096


def test_unknown_model_is_said_not_failed():
    c = TrainConfig.model_validate({"model": {"name_or_path": "/nowhere/model"}})
    p = plan(c, JobShape(gpu_memory_gib=80))
    assert p.fits is None and p.train_gib_per_gpu is None and "no config.json" in p.note


def dry_run(*overrides: str, code: int = 0) -> list[dict]:
    """The paper study's dry run as --json; `code` 2 where the sweep would refuse it (the
    plans are printed first)."""
    args = [x for o in overrides for x in ("--override", o)]
    r = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm_gpu", "--dry-run", "--json",
               *args)
    assert r.returncode == code, r.stderr
    assert code == 0 or "does not fit 80 GiB GPUs" in r.stderr, r.stderr
    return json.loads(r.stdout)


@pytest.mark.slow
def test_paper_recipe_fits_80_gib_and_not_without_zero():
    runs = dry_run()
    assert len(runs) == 6
    for run in runs:
        res = run["resources"]
        assert res["gpu_gib"] == 80 and res["fits"] is True
        assert 0 < res["train_gib_per_gpu"] <= 80 and 0 < res["generation_gib_per_gpu"] <= 80
        assert res["train_gib_per_gpu"] == pytest.approx(sum(res["train_terms_gib"].values()), abs=0.05)
    no_zero = dry_run("engine.zero_stage=0", code=2)
    for run in no_zero:
        res = run["resources"]
        assert res["fits"] is False and res["train_gib_per_gpu"] > 80
        assert res["largest"] == "optimizer states"  # 12 bytes/param unpartitioned: ~92 GiB
        assert res["train_terms_gib"]["optimizer states"] * GIB == pytest.approx(
            12 * QWEN3_8B.params, rel=1e-3)


@pytest.mark.slow
def test_sweep_refuses_a_study_that_does_not_fit_and_force_overrides(tmp_path):
    results = tmp_path / "results"
    r = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm_gpu", "--results",
               str(results), "--override", "engine.zero_stage=0")
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, line
    assert "variant loss.aggregation=sample does not fit 80 GiB" in line
    assert "optimizer states" in line and "engine.zero_stage" in line and "--force" in line
    assert not results.exists()
    from ablate.studies.sweep import plan_sweep  # --force: planned for submission (not sent here)

    plan = plan_sweep("recipes/loss_agg.yaml", profile="slurm_gpu", results=results, force=True,
                      overrides=["engine.zero_stage=0"])
    assert len(plan.submit) == 6 and not results.exists()


@pytest.mark.slow
def test_cpu_profile_has_no_gpu_check():
    r = ablate("sweep", "recipes/quickstart.yaml", "--profile", "local", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    for run in json.loads(r.stdout):
        res = run["resources"]
        assert res["gpu_gib"] is None and res["fits"] is None and res["train_gib_per_gpu"] > 0


@pytest.mark.slow
def test_dry_run_text_names_terms_and_verdict():
    r = ablate("sweep", "recipes/loss_agg.yaml", "--profile", "slurm_gpu", "--dry-run")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for term in ("weights", "gradients", "optimizer states", "activation checkpoints",
                 "LM head logits chunk", "KV cache", "largest:", "-> fits",
                 "6 vLLM engines of 1 GPU each on every node (2 nodes, 12 in all)"):  # 8B: 1 GPU
        assert term in out, term
    assert "idle" not in out  # pipeline: every node's generation GPUs run its engines


def test_eval_kv_cache_is_planned_and_bounded_by_eval_batch_size():
    """The hf backend evaluates with its sampler on the training GPUs, eval.batch_size rows at
    a time; vllm evaluates through the engines (trainer/generation/eval_service.py): no eval term there."""
    from trainer.plan.memory import eval_kv_bytes, kv_bytes_per_token, sequence_tokens

    tree = {"model": {"name_or_path": "Qwen/Qwen3-8B", "gradient_checkpointing": True},
            "rollout": {"backend": "hf", "max_new_tokens": 14336, "prompts_per_step": 1},
            "off_policy": {"mode": "ppo_off_policy", "k": 1},
            "engine": {"type": "deepspeed", "zero_stage": 3, "micro_batch_tokens": 32768},
            "eval": {"batch_size": 16, "samples_per_prompt": 16}}
    c = TrainConfig.model_validate(tree)
    # 2 (K, V) x 36 layers x 8 kv heads x 128 x 2 bytes = 147,456 bytes per token
    assert kv_bytes_per_token(c, QWEN3_8B) == 147456
    assert eval_kv_bytes(c, QWEN3_8B) == 16 * sequence_tokens(c) * 147456
    shape = JobShape(nodes=2, ranks_per_node=8, gpus_per_node=8, gpu_memory_gib=80)
    ok = plan(c, shape)
    assert ok.fits and ok.train["eval: KV cache (beyond the training step)"] > 0
    unbounded = plan(TrainConfig.model_validate({**tree, "eval": {"samples_per_prompt": 16}}), shape)
    assert unbounded.fits is False and unbounded.largest.startswith("eval")  # 64 prompts x 16
    service = plan(TrainConfig.model_validate(
        {**tree, "rollout": {**tree["rollout"], "backend": "vllm"}, "eval": {"samples_per_prompt": 16}}),
        JobShape(nodes=2, ranks_per_node=8, gpus_per_node=8, gpu_memory_gib=80))
    assert not any(k.startswith("eval") for k in service.train), service.train


SMALL = {"model": {"name_or_path": "Qwen/Qwen2.5-0.5B"}, "length": {"control": "none"},
         "rollout": {"backend": "vllm", "max_new_tokens": 2048, "prompts_per_step": 4,
                     "generations_per_prompt": 16},
         "eval": {"num_prompts": 4, "samples_per_prompt": 16}}


def small(**over) -> TrainConfig:
    tree = json.loads(json.dumps(SMALL))
    return TrainConfig.model_validate(set_dotted(tree, over))


def test_kv_cache_is_sized_for_each_nodes_share_and_eval_over_every_node():
    """In pipeline mode every node's engines generate their node's share of a step's groups
    (trainer/generation/offpolicy.py); on one node eval goes to its engines beside them (64 +
    64 over 4), on several it is dealt over every node's engines while rollouts are paused
    (trainer/loop/final_eval.py; issue 46): an engine holds its node's share of the rollout
    call over its node's engines plus its share of the eval over all (2 nodes: 32 / 4 + 64 /
    8 = 16), not the whole call plus eval (the rule when only rank 0's node ran engines)."""
    from trainer.plan.memory import kv_bytes_per_token, sequence_tokens

    per_seq = sequence_tokens(small()) * kv_bytes_per_token(small(), model_shape("Qwen/Qwen2.5-0.5B")[0])
    one, two = (plan(small(), JobShape(nodes=n, ranks_per_node=4, gpus_per_node=8, gpu_memory_gib=80))
                for n in (1, 2))
    # the 0.5B model fits one GPU: 4 one-GPU replicas a node; 1 node: (64 + 64) / 4 each
    assert one.generation["KV cache"] == pytest.approx(32 * per_seq / GIB, abs=0.01)
    assert two.generation["KV cache"] == pytest.approx(16 * per_seq / GIB, abs=0.01)
    assert "KV room for" in two.kv_sequences and " of 16 sequences" in two.kv_sequences
    tp4 = plan(small(rollout__vllm__tensor_parallel_size=4),
               JobShape(nodes=2, ranks_per_node=4, gpus_per_node=8, gpu_memory_gib=80))
    assert tp4.generation["KV cache"] == pytest.approx(64 * per_seq / 4 / GIB, abs=0.01)
    assert " of 64 sequences" in tp4.kv_sequences  # one engine of 4 GPUs a node: 32 + 64 / 2
    # Two replicas a node split their node's sequences; ppo_off_policy deals its big
    # generation (k x the prompts) over every node's engines, and its eval runs between steps
    # (the larger of the two calls, not their sum).
    reps = plan(small(rollout__vllm__tensor_parallel_size=1, rollout__vllm__data_parallel_replicas=2),
                JobShape(nodes=2, ranks_per_node=4, gpus_per_node=8, gpu_memory_gib=80))
    assert " of 32 sequences" in reps.kv_sequences  # 32 / 2 + 64 / 4
    ppo = plan(small(off_policy__mode="ppo_off_policy", off_policy__k=2),
               JobShape(nodes=2, ranks_per_node=4, gpus_per_node=8, gpu_memory_gib=80))
    assert " of 16 sequences" in ppo.kv_sequences  # max(2 x 4 / 2 x 16 / 4, 4 x 16 / 8)


def test_dry_run_says_where_engines_run_and_which_gpus_idle():
    from trainer.plan.memory import plan as plan_of

    shape = JobShape(nodes=2, ranks_per_node=4, gpus_per_node=8, gpu_memory_gib=80)
    paper = plan_of(small(), shape).note  # pipeline: 4 generation GPUs per node, 4 replicas
    assert "4 vLLM engines of 1 GPU each on every node (2 nodes, 8 in all)" in paper, paper
    assert ("each node 2 of a step's 4 prompt groups, and every eval, all of them at the "
            "step's weights with rollouts paused") in paper
    assert "idle" not in paper and "rank 0's node only" not in paper, paper  # every node's run
    one_node = plan_of(small(), JobShape(nodes=1, ranks_per_node=4, gpus_per_node=8,
                                         gpu_memory_gib=80)).note
    assert "idle" not in one_node and "4 vLLM engines of 1 GPU each on rank 0's node" in one_node
    # Fewer engines than generation GPUs leave the rest idle on every node, and say so.
    two = plan_of(small(rollout__vllm__data_parallel_replicas=2), shape).note
    assert "4 of the job's 16 GPUs are idle (2 on rank 0's node, 2 on the other node)" in two, two
    assert "2 engines x tensor_parallel_size 1 use 2 of each node's 4 generation GPUs" in two
    # ppo_off_policy: the same split, every node's engines making its share of each big
    # generation (k steps' prompt groups), none idle.
    ppo = plan_of(small(off_policy__mode="ppo_off_policy"), shape).note
    assert ("4 vLLM engines of 1 GPU each on every node (2 nodes, 8 in all) serve the job's "
            "rollouts, each node 16 of each generation's 32 (8 steps', then 8 training steps) "
            "prompt groups") in ppo, ppo
    assert "idle" not in ppo, ppo
    # 2 tasks per node leave 2 training GPUs a node unused, and say so
    two_tasks = plan_of(small(off_policy__mode="ppo_off_policy", rollout__vllm__generation_gpus=4),
                        JobShape(nodes=2, ranks_per_node=2, gpus_per_node=8, gpu_memory_gib=80))
    assert "4 of the job's 16 GPUs are idle" in two_tasks.note, two_tasks.note
    assert "tasks_per_node=2 starts fewer ranks than the node's 4 training GPUs" in two_tasks.note


@pytest.mark.slow
@pytest.mark.parametrize("regime", ["deepspeed-bf16", "torch-autocast-bf16", "fp32"])
def test_layer_activations_match_the_tensors_autograd_saves(regime):
    """The per-token activation count of one block against the bytes autograd really saves for
    backward (saved_tensors_hooks, each storage once, parameters excluded), on CPU: bf16 module
    (DeepSpeed's bf16), fp32 module under bf16 autocast (the torch engine), fp32. The slope
    between two token counts cancels per-layer constants (autocast's bf16 weight copies)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from trainer.plan.model_shape import shape_from_hf
    from trainer.plan.memory import layer_activation_bytes_per_token

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=100, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa")
    model = LlamaForCausalLM(cfg).train()
    if regime == "deepspeed-bf16":
        model.to(torch.bfloat16)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    body, saved = model.get_decoder(), {}

    def pack(t):
        st = t.untyped_storage()
        if st.data_ptr() not in params and t.is_floating_point():
            saved[st.data_ptr()] = st.nbytes()
        return t

    def saved_bytes(layers: int, tokens: int) -> int:
        saved.clear()
        every = body.layers
        body.layers = every[:layers]
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=regime == "torch-autocast-bf16"):
            body(input_ids=torch.randint(0, 100, (2, tokens // 2)), use_cache=False)
        body.layers = every
        return sum(saved.values())

    def one_layer(tokens: int) -> int:
        return saved_bytes(2, tokens) - saved_bytes(1, tokens)

    measured = (one_layer(1024) - one_layer(512)) / 512
    engine = {"deepspeed-bf16": "deepspeed", "torch-autocast-bf16": "torch", "fp32": "torch"}[regime]
    c = TrainConfig.model_validate({"engine": {"type": engine},
                                    "precision": {"dtype": "fp32" if regime == "fp32" else "bf16"}})
    model_bytes = layer_activation_bytes_per_token(c, shape_from_hf(cfg.to_dict(), "test"))
    assert model_bytes == pytest.approx(measured, rel=0.05)
