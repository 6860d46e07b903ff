"""GPU memory a run will need, per training rank and per generation GPU, from first principles.

Why here (trainer/) and not in ablate/: the model is a description of what *this trainer*
allocates (ZeRO partitioning through DeepSpeed, the chunked fp32 LM head of
trainer/models/logprobs.py, the hf/vLLM generators), so it changes when the trainer changes;
`ablate sweep --dry-run` only shows it, and benchmarks/gpu/bench_memory_plan.py checks it
against torch.cuda.max_memory_allocated on a GPU. Pure Python (no torch import): ablate plans
thousands of variants with it.

Sources of the formulas (bytes; Psi = parameters, d = data-parallel degree):
- Model states, ZeRO (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training
  Trillion Parameter Models", sec. 3.1 and Fig. 1): mixed-precision Adam holds 2 Psi (16-bit
  weights) + 2 Psi (16-bit gradients) + 12 Psi (fp32 master weights, momentum, variance).
  Stage 1 divides the 12 Psi by d, stage 2 also the gradients, stage 3 also the weights.
  Without mixed precision (fp32 body, or the torch engine, which keeps fp32 weights under
  autocast) it is 4 + 4 + 8 bytes, unpartitioned for the torch engine (plain data parallel).
- Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large
  Transformer Models", sec. 4.1): a transformer layer stores s*b*h*(34 + 5*a*s/h) bytes with
  16-bit activations. We adapt their count to this trainer's blocks (Llama/Qwen): no dropout
  (no 1-byte masks), SDPA/flash attention (no a*s^2 score matrix, only O and its logsumexp),
  grouped-query K/V, a SwiGLU MLP of width I (gate, up, act, product: 4 tensors of I), and
  RMSNorm inputs kept in fp32 by HF's RMSNorm. With full activation checkpointing (sec. 5,
  "full recomputation") only each layer's input (s*b*h 16-bit values) is kept, plus one
  layer's working set while it is recomputed in the backward (its activations and their
  gradients: twice the forward set).
- LM head: trainer/models/logprobs.py computes the head over at most MAX_LOGITS_PER_CHUNK logits
  at once (fp32); at its peak a chunk holds the logits, the tempered copy and their gradient (3
  x 4 bytes per logit), plus the fp32 copy of the head weight (precision.trainer_lm_head_fp32).
- KV cache (vLLM's PagedAttention, Kwon et al. 2023, and HF's DynamicCache alike):
  2 (K and V) x layers x kv_heads x head_dim x bytes per token of every sequence in flight.
  Which sequences an engine holds follows from where the trainer starts its engines (pipeline
  mode with vLLM: on every node, each node's its share of a step's prompts; otherwise on rank
  0's node) and what each is sent (rollouts, and eval through rank 0's service, to rank 0's
  node's engines): trainer/plan/placement.py, which also names the GPUs a job holds but
  leaves idle.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Optional

from trainer.config import TrainConfig
from trainer.plan.model_shape import (  # noqa: F401 (KNOWN, shape_from_hf: re-exported)
    KNOWN, ModelShape, model_shape, proxy_shape, shape_from_hf)
from trainer.plan.topology import JobShape, Topology, TopologyError, topology
from trainer.plan.engine_fit import (  # noqa: F401 - re-exported: the plan's terms
    CUDA_OVERHEAD_GIB, GIB, PROMPT_TOKENS, VLLM_UTILIZATION, engine_gpu_bytes, kv_bytes_per_token,
    kv_room, max_num_seqs, sequence_tokens)
from trainer.plan.placement import placement_note, rows_per_engine

# trainer/models/logprobs.py MAX_LOGITS_PER_CHUNK (kept equal by tests/test_resources.py; not
# imported, as that module imports torch).
MAX_LOGITS_PER_CHUNK = 2 ** 28
VLLM_SHARED_UTILIZATION = 0.3  # ... when it shares the one GPU with the trainer




@dataclass
class Plan:
    """GiB per GPU. `train` terms are per training rank; `generation` per generation GPU."""

    model: str
    params_b: float
    dp: int
    tokens_per_forward: int
    train: dict[str, float] = field(default_factory=dict)
    generation: dict[str, float] = field(default_factory=dict)
    train_gib_per_gpu: Optional[float] = None
    generation_gib_per_gpu: Optional[float] = None
    generation_where: str = ""  # "own GPUs" | "training GPUs"
    kv_sequences: str = ""  # e.g. "KV room for 40 of 96 sequences at full length"
    gpu_gib: Optional[float] = None
    train_budget_gib: Optional[float] = None
    largest: str = ""
    fits: Optional[bool] = None
    note: str = ""
    device: str = "GPU"  # "CPU" (`on_cpu`): the terms are RAM of the training process

    def to_json(self) -> dict:
        return asdict(self)


def on_cpu(c: TrainConfig, shape: JobShape) -> bool:
    """The run trains on CPU: its nodes have no GPUs (or none known here) and the model is the
    CPU proxy (a named model without GPUs gets no plan). The time plan uses the same rule."""
    return not shape.gpus_per_node and c.model.name_or_path is None


def model_state_terms(c: TrainConfig, m: ModelShape, dp: int) -> dict[str, float]:
    """Weights, gradients, optimizer states per rank (ZeRO paper's accounting), in bytes."""
    psi = m.params
    mixed = c.engine.type == "deepspeed" and c.precision.dtype == "bf16"
    w, g, o = (2, 2, 12) if mixed else (4, 4, 8)  # ZeRO sec. 3.1: 2+2+12; fp32: 4+4+8
    stage = c.engine.zero_stage if c.engine.type == "deepspeed" else 0
    terms = {"weights": w * psi / (dp if stage >= 3 else 1),
             "gradients": g * psi / (dp if stage >= 2 else 1),
             "optimizer states": o * psi / (dp if stage >= 1 else 1)}
    if c.engine.type == "torch" and c.precision.dtype == "bf16":
        # The torch engine keeps fp32 weights and runs the body under bf16 autocast, which
        # caches a bf16 copy of every weight it casts until the forward's autocast region ends.
        terms["bf16 weight copies (autocast)"] = 2 * psi
    if stage == 3:
        # Gathered for compute: the current layer and the prefetched next one, plus the LM head
        # weight kept whole on every rank (engine_deepspeed.persist_head_weight).
        terms["ZeRO-3 gathered layers + head"] = w * (2 * m.layer_params + m.vocab * m.hidden)
    return terms


def layer_activation_bytes_per_token(c: TrainConfig, m: ModelShape) -> float:
    """One Llama/Qwen block's saved activations per token (Korthikanti et al. 2022 sec. 4.1,
    adapted: no dropout, SDPA attention, GQA, SwiGLU, fp32 RMSNorm inputs)."""
    b = 2 if c.precision.dtype == "bf16" else 4
    h, q, kv, i = m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim, m.intermediate
    attn = 4 * h + b * h + b * (q + 2 * kv) + b * (q + kv) + b * q + 4 * m.heads
    mlp = 4 * h + b * h + 4 * b * i
    if c.engine.type == "torch" and c.precision.dtype == "bf16":
        # fp32 weights under bf16 autocast: the residual stream stays fp32, so each RMSNorm
        # also keeps its fp32 normalized output (2 x 4h), and the rotary products of bf16 q, k
        # with fp32 cos/sin are fp32 (2 more bytes each).
        attn += 8 * h + 2 * (q + kv)
    return attn + mlp


def tokens_per_forward(c: TrainConfig, dp: int) -> int:
    """Tokens one forward/backward holds: engine.micro_batch_tokens (a sample is never split,
    so at least one full-length sample), else the rank's whole share of the batch."""
    seq = sequence_tokens(c)
    rows = math.ceil(c.rollout.prompts_per_step * c.rollout.generations_per_prompt / dp)
    mbt = getattr(c.engine, "micro_batch_tokens", None)
    return min(rows * seq, max(mbt, seq)) if mbt else rows * seq


def activation_terms(c: TrainConfig, m: ModelShape, t: int) -> dict[str, float]:
    b = 2 if c.precision.dtype == "bf16" else 4
    layer = layer_activation_bytes_per_token(c, m) * t
    if c.model.gradient_checkpointing:
        # Each layer's input (and the final hidden state) kept; one layer recomputed in the
        # backward holds its activations and their gradients (Korthikanti sec. 5).
        return {"activation checkpoints": (m.layers + 1) * t * m.hidden * b,
                "recomputed layer": 2 * layer}
    return {"activations": m.layers * layer + t * m.hidden * b}


def logits_bytes(c: TrainConfig, m: ModelShape, t: int) -> float:
    """trainer/models/logprobs.py head_logprobs: one chunk of <= MAX_LOGITS_PER_CHUNK fp32
    logits (logits, tempered copy, gradient) plus the fp32 copy of the head weight."""
    rows = max(1, MAX_LOGITS_PER_CHUNK // m.vocab)
    chunk = min(t, rows) * m.vocab * 4 * 3
    return chunk + (4 * m.vocab * m.hidden if c.precision.trainer_lm_head_fp32 else 0)


def vllm_terms(c: TrainConfig, m: ModelShape, t: Topology, gpu_gib: Optional[float],
               util: float) -> tuple[dict[str, float], str]:
    """One vLLM GPU: its share of the weights (tensor parallel over `t.tp` GPUs) and the KV cache
    of the sequences its engine decodes at once: what fits in `util` of the GPU, at most what
    the busiest engine is sent (trainer/plan/placement.py: its node's rollouts, plus eval
    on rank 0's node) and vLLM's max_num_seqs on that GPU. Returns (terms in bytes, what the KV cache
    holds)."""
    weights, per_seq = engine_gpu_bytes(c, m, t.tp)
    sent = rows_per_engine(c, t)
    cap = max_num_seqs(gpu_gib, t.shape.gpu_model)  # vLLM 0.32's scheduler limit (engine_fit)
    held = min(sent, cap)
    note = f"{held} sequences at full length"
    if gpu_gib is not None:
        room = kv_room(c, m, t.tp, gpu_gib, util)
        note = f"KV room for {room} of {held:,} sequences at full length"
        held = min(held, room)
    if sent > cap:
        note += (f"; each engine is sent up to {sent:,}: vLLM decodes at most {cap:,} at "
                 "once (max_num_seqs), the rest wait")
    return {"generation weights": weights, "KV cache": held * per_seq,
            "CUDA context": CUDA_OVERHEAD_GIB * GIB}, note


def hf_generation_terms(c: TrainConfig, m: ModelShape, dp: int) -> dict[str, float]:
    """The hf generator on a training GPU: the KV cache of the rank's rows (all decoded at
    once), plus in pipeline mode the generator's private copy of the model."""
    rows = math.ceil(c.rollout.prompts_per_step * c.rollout.generations_per_prompt / dp)
    terms = {"KV cache": rows * sequence_tokens(c) * kv_bytes_per_token(c, m)}
    if c.off_policy.mode == "pipeline":
        mixed = c.engine.type == "deepspeed" and c.precision.dtype == "bf16"
        terms["generator model copy"] = m.params * (2 if mixed else 4)
    return terms


STATE_TERMS = ("weights", "gradients", "optimizer states", "ZeRO-3 gathered layers + head",
               "bf16 weight copies (autocast)", "CUDA context")


def _add_phase(train: dict[str, float], label: str, need: float) -> None:
    """A phase that runs between training steps (generation, eval) on the training GPU holds
    the model states plus `need`; where that exceeds the step's total, the excess is a term."""
    resident = sum(v for k, v in train.items() if k in STATE_TERMS)
    extra = resident + need - sum(train.values())
    if extra > 0:
        train[label] = extra


def eval_kv_bytes(c: TrainConfig, m: ModelShape) -> float:
    """KV cache of one eval generate call: trainer/evaluate.py prompts_per_call (eval.batch_size
    rows in whole prompts, at least one; unset: 64 prompts) x samples_per_prompt rows, each at
    full length."""
    k = c.eval.samples_per_prompt
    batch = getattr(c.eval, "batch_size", None)
    prompts = 64 if batch is None else max(1, batch // k)
    n_eval = c.eval.num_prompts or c.task.num_eval_prompts
    return min(prompts, n_eval) * k * sequence_tokens(c) * kv_bytes_per_token(c, m)


def _gib(terms: dict[str, float]) -> dict[str, float]:
    return {k: round(v / GIB, 2) for k, v in terms.items()}


def plan(c: TrainConfig, shape: JobShape) -> Plan:
    """The resource plan of one run on `shape` (gpu_memory_gib None: no GPU check)."""
    name = c.model.name_or_path
    m, why = (proxy_shape(c), "") if name is None else model_shape(name)
    try:
        topo = topology(c, shape)
    except TopologyError as e:  # what the validation refuses: the plan says why, no numbers
        return Plan(model=name or "proxy", params_b=0.0, dp=shape.world, tokens_per_forward=0,
                    gpu_gib=shape.gpu_memory_gib, note=f"no memory plan: {e}")
    dp = topo.training_ranks
    p = Plan(model=name or "proxy", params_b=0.0, dp=dp, tokens_per_forward=0,
             gpu_gib=shape.gpu_memory_gib)
    if m is None:
        p.note = f"model shape unknown: {why}; no memory estimate"
        return p
    p.params_b = round(m.params / 1e9, 3)
    p.tokens_per_forward = t = tokens_per_forward(c, dp)
    train = {**model_state_terms(c, m, dp), **activation_terms(c, m, t),
             "LM head logits chunk": logits_bytes(c, m, t), "CUDA context": CUDA_OVERHEAD_GIB * GIB}
    if on_cpu(c, shape):  # RAM of one process: no CUDA context, generation beside training
        p.device = "CPU"
        del train["CUDA context"]
    gpu, gen, fits_gen = shape.gpu_memory_gib, {}, True
    budget = gpu
    if c.rollout.backend == "vllm":
        gen, budget, fits_gen = _vllm_generation(c, m, topo, p)
    else:
        gen = hf_generation_terms(c, m, dp)
        p.generation_where = "training process" if p.device == "CPU" else "training GPUs"
        if c.off_policy.mode == "pipeline":
            train.update({f"generation: {k}": v for k, v in gen.items()})
        else:  # generation and the training step take turns: the larger of the two counts
            _add_phase(train, "generation: KV cache (beyond the training step)", sum(gen.values()))
        # Eval (trainer/loop/eval_point.py EvalPoint.launch): the hf sampler on the trainer's own
        # weights, on every ZeRO-3 rank, between steps: model states stay, the step's
        # activations are gone. With vllm, eval goes through the engines
        # (trainer/generation/eval_service.py) instead.
        _add_phase(train, "eval: KV cache (beyond the training step)", eval_kv_bytes(c, m))
    p.train, p.generation = _gib(train), _gib(gen)
    p.train_gib_per_gpu = round(sum(train.values()) / GIB, 2)
    p.generation_gib_per_gpu = round(sum(gen.values()) / GIB, 2)
    p.largest = max(p.train, key=p.train.get)
    p.note = "; ".join(x for x in (rank_note(topo), p.note) if x)
    if gpu is not None:
        p.train_budget_gib = round(budget, 2)
        p.fits = p.train_gib_per_gpu <= budget and fits_gen
    return p


def _vllm_generation(c: TrainConfig, m: ModelShape, t: Topology,
                     p: Plan) -> tuple[dict[str, float], Optional[float], bool]:
    """The vllm backend's side of the plan: (generation terms in bytes, the training GPU's
    budget in GiB, whether a full-length sequence fits the engine's KV room). Sets the plan's
    generation_where, kv_sequences and the engines' placement sentence (its note)."""
    shape = t.shape
    gpus, gpu = shape.gpus_per_node or 0, shape.gpu_memory_gib
    # The engine's arguments (trainer/generation/vllm_engine.py, see vllm_args.py): 0.3 only on a
    # one-GPU node (a training GPU too; refused on GPUs by trainer/validate.py, planned all the
    # same); on GPUs of their own (a multi-GPU node's split, or a generation node) vLLM takes 0.9.
    util = c.rollout.vllm.gpu_memory_utilization or (
        VLLM_UTILIZATION if t.own_gpus else VLLM_SHARED_UTILIZATION)
    gen, p.kv_sequences = vllm_terms(c, m, t, gpu, util)
    p.generation_where = "own GPUs" if t.own_gpus else "training GPUs (shared)"
    if gpus:
        p.note = placement_note(c, shape, t)
    if gpu is None:
        return gen, None, True
    # Sharing: each engine on the GPU reserves its share of it up front.
    budget = gpu if t.own_gpus else gpu * (1 - util * t.per_gpu)
    return gen, budget, "room for 0 " not in p.kv_sequences


def rank_note(t: Topology) -> str:
    """Say so when the profile starts more ranks per node than there are training GPUs: the
    plan assumes one rank per training GPU (the generation GPUs hold no trainer rank)."""
    gpus, shape, train = t.shape.gpus_per_node or 0, t.shape, len(t.training)
    if not t.own_gpus or shape.ranks_per_node <= train:
        return ""
    return (f"planned as one rank per training GPU: {train} of the node's {gpus} GPUs train, "
            f"{gpus - train} generate (the profile starts {shape.ranks_per_node} ranks per node)")


def advice(c: TrainConfig, p: Plan) -> str:
    """What to change when a plan does not fit (the largest term decides)."""
    term = p.largest
    if p.train_budget_gib is not None and p.train_gib_per_gpu is not None \
            and p.train_gib_per_gpu <= p.train_budget_gib:
        return ("the KV cache of one full-length sequence does not fit the generation GPU: "
                "lower rollout.max_new_tokens or raise rollout.vllm.gpu_memory_utilization")
    if p.generation_where.startswith("training GPUs (shared)") and p.gpu_gib is not None \
            and p.train_gib_per_gpu is not None and p.train_gib_per_gpu <= p.gpu_gib:
        return ("vLLM takes rollout.vllm.gpu_memory_utilization of GPUs the trainer also uses "
                "(one-GPU nodes): lower it (e.g. 0.3), or use nodes of at least 2 GPUs")
    if term in ("weights", "gradients", "optimizer states"):
        if c.engine.type != "deepspeed":
            return "use engine.type: deepspeed with engine.zero_stage: 3, or more GPUs"
        if c.engine.zero_stage < 3:
            return f"raise engine.zero_stage (now {c.engine.zero_stage}) to 3, or use more GPUs"
        return "use more GPUs (slurm.nodes), or a smaller model"
    if "activation" in term or term == "recomputed layer":
        fix = "set model.gradient_checkpointing: true and " if not c.model.gradient_checkpointing else ""
        return f"{fix}lower engine.micro_batch_tokens (now {getattr(c.engine, 'micro_batch_tokens', None)})"
    if term.startswith("eval"):
        return (f"lower eval.batch_size (now {getattr(c.eval, 'batch_size', None)}; one prompt's "
                f"{c.eval.samples_per_prompt} samples at least) or rollout.max_new_tokens")
    if term.startswith("generation"):
        return "use rollout.backend: vllm, or lower rollout.prompts_per_step / max_new_tokens"
    return "lower engine.micro_batch_tokens or use more GPUs"
