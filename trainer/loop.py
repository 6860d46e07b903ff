"""The training loop, top to bottom: pool -> generate -> reward -> filter -> advantages ->
loss -> step -> weight push -> eval + metrics + checkpoint. One function, `run`.

Multi-process jobs (Slurm srun / torchrun; trainer/distributed.py): data parallel on the
training side, replicated generation. Every rank runs the same prompt source with the same
seeds, and rank 0's batch is then broadcast so all ranks hold byte-identical rollouts (a GPU's
non-deterministic kernels could otherwise make them differ); rewards, pool statistics and the
zero-variance filter therefore agree everywhere. The kept prompt groups are dealt out to the
ranks by tokens, and each rank's rows split into micro-batches of engine.micro_batch_tokens;
every token's loss weight carries the whole batch's aggregation denominators (times the world
size), so the accumulated, rank-averaged gradient equals the single-process gradient of the
whole batch (trainer/microbatch.py); a rank dealt no group still steps on a zero-weighted group,
and ranks run equally many micro-batches, so collectives line up. Why not shard
generation: the hf generator on a ZeRO-3 model all-gathers weights on every decode step, so
ranks must decode in lockstep anyway; generation throughput at scale comes from the vllm
backend. Only rank 0 writes the run dir (status, metrics, config); checkpoints are written by
every rank into one deterministic temp dir (DeepSpeed saves collectively) and rank 0 swaps it
in after a barrier.
"""

from __future__ import annotations

import math
import random
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer import gen_service, preempt, rundir, trackers
from trainer.advantages import compute_advantages
from trainer.chat import prompt_encoder
from trainer.config import LOSS_OPTIONS, TrainConfig
from trainer.distributed import (
    all_reduce_floats,
    barrier,
    broadcast_object,
    gpu_split_args,
    join_process_group,
    rank,
    world_size,
)
from trainer.devices import job_devices
from trainer.engine import make_engine
from trainer.evaluate import pass_rate, score
from trainer.filters import zero_variance_keep
from trainer.losses import LOSSES, loss_options
from trainer.microbatch import StepTotals, deal_groups, plan_micro_batches, rows_token_weights
from trainer.logprobs import (
    completion_logprobs,
    pack,
    pack_right,
    right_padded_logprobs,
    shared_prefix_logprobs,
)
from trainer.model import load_model, pick_device
from trainer.offpolicy import MODES, Context
from trainer.pool import PromptPool
from trainer.precision import LMHead
from trainer.rollout import HFGenerator
from trainer.tasks import build_task


class Diverged(Exception):
    """A non-finite loss or grad norm at optimizer step `step` (1-based: the step that failed)."""

    def __init__(self, step: int) -> None:
        super().__init__(f"non-finite loss or grad at step {step}")
        self.step = step


def run(config: TrainConfig, run_dir: Path) -> None:
    """Train (or resume) one run into `run_dir`. Returns when the budget is spent, or the run
    diverged (status.json says so with the step); raises after marking status `failed`."""
    run_dir = Path(run_dir)
    main = _setup_distributed(config)
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
        rundir.write_config(run_dir, config)
    # A diverged run stays diverged (its last good checkpoint is kept for inspection). A done
    # run resumes like any other: with an unchanged budget it finishes at once, with a larger
    # one it continues from its checkpoint. Rank 0 decides for all.
    if broadcast_object(rundir.read_status(run_dir).get("state") == "diverged"
                        and rundir.checkpoint_dir(run_dir) is not None):
        return
    step = 0
    try:
        state = _Run(config, run_dir)
        step = state.step
        state.train()
    except Diverged as e:  # every rank sees the same verdict (it is all-reduced)
        if main:
            rundir.write_status(run_dir, "diverged", e.step,
                                reason="non-finite loss or grad")
    except BaseException as e:
        if main:
            rundir.write_status(run_dir, "failed", step, error=f"{type(e).__name__}: {e}",
                                traceback=traceback.format_exc()[-4000:])
        raise
    finally:
        trackers.close()  # after the final status: trackers record done / failed / diverged


def _setup_distributed(config: TrainConfig) -> bool:
    """Join the launcher's process group (multi-process jobs only); True on rank 0. The torch
    engine is data parallel through its gradient all-reduce, the deepspeed engine through
    DeepSpeed; both need the group before the engine is built."""
    return join_process_group(config.engine.device, **gpu_split_args(config))


def shard_groups(groups: list[int], rank: int, world: int) -> tuple[list[int], bool]:
    """This rank's kept prompt groups (dealt round-robin) and whether it got any; a rank with
    none borrows the first group to run a zero-weighted step (collectives must line up)."""
    mine = groups[rank::world]
    return (mine, True) if mine else (groups[:1], False)


def shard_weight(aggregation: str, local: dict, total: dict, world: int) -> float:
    """Loss multiplier making the mean over ranks of the local losses equal the aggregation
    over the whole batch: world x (this shard's share of the aggregation's denominator:
    tokens for `token`, samples for `sample`, prompt groups for `prompt`)."""
    unit = {"token": "tokens", "sample": "samples", "prompt": "groups"}.get(aggregation)
    if unit is None:
        raise ValueError(f"loss.aggregation {aggregation!r} has no data-parallel weighting; "
                         "valid with world size > 1: token, sample, prompt")
    return world * local[unit] / max(total[unit], 1)


@dataclass
class LossBatch:
    """The kept rows of a rollout as padded tensors for the policy loss."""

    rows: list[int]  # rollout rows, in batch order
    packed: dict  # trainer.model.pack: input_ids, attention_mask, completion mask, P
    mask: torch.Tensor  # [B, T] completion tokens the loss counts
    old_logp: torch.Tensor  # [B, T] behaviour log-probs (the sampler's)
    group: torch.Tensor  # [B] prompt group of each row
    adv: torch.Tensor  # [B] advantage of each row
    weight: torch.Tensor  # [B, T] each token's weight in the whole batch's loss (microbatch.py)


class _Run:
    """State of one run; methods are the loop's stages in the order they happen."""

    def __init__(self, config: TrainConfig, run_dir: Path) -> None:
        self.c, self.dir = config, run_dir
        torch.set_flush_denormal(True)  # tiny models hit denormals: 10-50x slower CPU ops
        if config.engine.threads:
            torch.set_num_threads(config.engine.threads)
        torch.manual_seed(config.seed)
        random.seed(config.seed)
        _setup_distributed(config)  # idempotent; also for callers that skip run()
        self.rank, self.world = rank(), world_size()
        self.main = self.rank == 0
        if self.main:
            run_dir.mkdir(parents=True, exist_ok=True)
        self.device = pick_device(config.engine.device)
        self.task = build_task(config.task, config.eval.split)  # first: a missing dataset fails fast
        model, self.tok = load_model(config)
        enc = self.encode
        self.train_prompts = [enc(p.prompt) for p in self.task.train]
        n_eval = config.eval.num_prompts or config.task.num_eval_prompts
        self.eval_problems = self.task.eval[:n_eval]
        self.eval_prompts = [enc(p.prompt) for p in self.eval_problems]
        self.engine = make_engine(config, model.to(self.device))
        self.device = getattr(self.engine, "device", self.device)
        self.rank, self.world = rank(), world_size()  # single-process DeepSpeed: a world of 1
        self.main = self.rank == 0
        self.model = self.engine.model
        self.model.eval()  # train() only around the update (gradient checkpointing, dropout)
        self.zero3 = config.engine.type == "deepspeed" and config.engine.zero_stage == 3
        self.head = LMHead(self.model.get_output_embeddings(), config.precision.trainer_lm_head_fp32)
        self.body = self.model.get_decoder()
        # ZeRO-3 leaves each rank an empty shard per parameter; ds_numel is the full size.
        self.n_params = sum(getattr(p, "ds_numel", p.numel()) for p in self.model.parameters())
        self.pool = PromptPool([p.difficulty for p in self.task.train], config.data, config.seed)
        self.step = 0
        self.counters = {"samples": 0, "tokens": 0, "flops_gen": 0.0, "flops_train": 0.0,
                         "wall": 0.0, "zero_variance_dropped": 0, "gen_counter": 0}
        self.acc: dict[str, float] = {}
        self._resume()
        self.ctx = Context(config, self.model, self.tok, self.pool, self.train_prompts,
                           self.counters["gen_counter"])

    @property
    def encode(self):
        """Prompt text -> ids; real chat models get their chat template (model.chat_template)."""
        return prompt_encoder(self.tok, self.c.model.chat_template)

    # -- resume / checkpoint -------------------------------------------------------------
    def _resume(self) -> None:
        import shutil

        if self.main:
            for stale in self.dir.glob("checkpoint.tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
        barrier()  # nobody looks for a checkpoint while rank 0 is still cleaning up
        ck = broadcast_object(rundir.checkpoint_dir(self.dir))
        if ck is None:
            if self.main:
                rundir.truncate_metrics(self.dir, None)
            return
        self.engine.load(ck / "engine")
        s = torch.load(ck / "state.pt", weights_only=False)
        self.step, self.counters, self.acc = s["step"], s["counters"], s["acc"]
        self.pool.load_state_dict(s["pool"])
        torch.set_rng_state(s["torch_rng"])
        random.setstate(s["py_rng"])
        barrier()  # every rank has read checkpoint/ before rank 0 may replace it
        if self.main:
            rundir.truncate_metrics(self.dir, self.step)

    def checkpoint(self) -> None:
        """Model, optimizer, scheduler, RNG, pool, counters. Every rank writes into the same
        deterministic temp dir (DeepSpeed's save is a collective; the torch engine's state is
        identical on all ranks, so rank 0 alone saves it); rank 0 swaps it in atomically."""
        import shutil

        self.counters["gen_counter"] = self.ctx.gen_counter
        tmp = self.dir / f"checkpoint.tmp-{self.step}"
        if self.main:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        barrier()
        if self.main or getattr(self.engine, "collective_save", False):
            self.engine.save(tmp / "engine")
        barrier()
        if self.main:
            torch.save({"step": self.step, "counters": dict(self.counters),
                        "acc": dict(self.acc), "pool": self.pool.state_dict(),
                        "torch_rng": torch.get_rng_state(), "py_rng": random.getstate()},
                       tmp / "state.pt")
            rundir.commit_checkpoint(self.dir, tmp)
        barrier()
        self.saved = (self.step, time.monotonic())  # for every_minutes and the preemption stop

    # -- the loop ------------------------------------------------------------------------
    def status(self, state: str) -> None:
        """status.json (rank 0): state, step, progress, and the run's preemption record
        (`preemptions`: over all attempts, per stop signal the step rank 0 was working on when
        it arrived and the step checkpointed at; `resumed_from`: the checkpoint step this
        attempt started from)."""
        if self.main:
            rundir.write_status(self.dir, state, self.step, total_steps=self.c.budget.steps,
                                progress=round(self.budget_fraction(), 4),
                                **getattr(self, "notes", {}))

    def train(self) -> None:
        c = self.c
        self.start_attempt()
        self.status("running")
        source = MODES.get(c.off_policy.mode)(self.ctx)
        try:
            if self.step == 0 and not broadcast_object(bool(rundir.read_metrics(self.dir))):
                self.evaluate(source)  # the source's generator serves eval (gen_service.py)
                self.checkpoint()
            source.after_step(self.model, self.step)  # resumed: stamp generator with this version
            while not self.budget_spent():
                t0 = time.perf_counter()
                preempt.at_step(self.step + 1)
                batch = broadcast_object(source.next(self.step))  # rank 0's data everywhere
                self.train_step(batch)
                self.step += 1
                source.after_step(self.model, self.step)
                self.counters["wall"] += time.perf_counter() - t0
                self.status("running")
                last = self.budget_spent()
                stop, timely = self.boundary_flags()
                if c.eval.due(self.step) or last:
                    self.evaluate(source)
                    self.checkpoint()
                elif self.step % c.checkpoint.every_steps == 0 or timely or stop:
                    self.checkpoint()
                if stop and not last:  # saved at this boundary; the launcher requeues
                    self.stop_for_preemption()
                    return
        finally:
            source.close()
        self.status("done")

    def start_attempt(self) -> None:
        """Carry the preemption record over from earlier attempts; note where this one
        starts. The wall-clock checkpoint timer starts now (a resume has just loaded one)."""
        prev = broadcast_object(rundir.read_status(self.dir))
        self.notes = {"preemptions": list(prev.get("preemptions", []))}
        if self.step:
            self.notes["resumed_from"] = self.step
            if self.main:
                print(f"[trainer] resumed from the checkpoint at step {self.step}",
                      file=sys.stderr, flush=True)
        self.saved = (self.step, time.monotonic())
        preempt.at_step(self.step + 1)  # a signal during start-up or the first eval: this step

    def boundary_flags(self) -> tuple[bool, bool]:
        """At a step boundary, agreed by every rank in one all-reduce (so DeepSpeed's
        collective save lines up): (a stop signal reached some rank, `checkpoint.every_minutes`
        has passed since the last save on rank 0's clock)."""
        every = self.c.checkpoint.every_minutes
        due = (every is not None and self.main
               and time.monotonic() - self.saved[1] >= every * 60)
        stop, due = all_reduce_floats([float(preempt.requested()), float(due)], self.device, "max")
        return bool(stop), bool(due)

    def stop_for_preemption(self) -> None:
        """Record the stop (status.json, stderr, trainer.preempt) after the boundary's save."""
        self.notes["preemptions"].append({"signal_in_step": preempt.signal_step(),
                                          "checkpoint_step": self.step})
        preempt.mark_stopped(self.step)
        self.status("running")  # still running as far as the study goes: the job requeues
        if self.main:
            print(f"[trainer] stop signal: checkpointed at step {self.step}, stopping for the "
                  "requeue", file=sys.stderr, flush=True)

    def budget_used(self) -> list[tuple[float, float]]:
        """(used, limit) for each limit the budget sets: steps, device-hours, FLOPs."""
        b, k = self.c.budget, self.counters
        return [(used, limit) for used, limit in (
            (self.step, b.steps), (self.gpu_hours(), b.gpu_hours),
            (k["flops_gen"] + k["flops_train"], b.flops)) if limit is not None]

    def budget_spent(self) -> bool:
        """Rank 0's verdict on every rank: wall-clock budgets would differ between ranks."""
        return broadcast_object(any(used >= limit for used, limit in self.budget_used()))

    def budget_fraction(self) -> float:
        """How much of the budget is spent, 0-1: the largest share of any limit (a FLOPs or
        device-hour budget has no step total for a progress bar to count to)."""
        return min(1.0, max(used / limit for used, limit in self.budget_used()))

    def gpu_hours(self) -> float:
        """Device-hours: train-loop wall (eval and checkpoints excluded) x every device the job
        holds, training and generation GPUs alike (trainer/devices.py; a CPU process counts
        as one device), so off-policy modes of one job shape share one x axis."""
        if not hasattr(self, "devices"):
            self.devices = job_devices(self.c, self.device, self.world)
        return self.counters["wall"] * self.devices / 3600

    def train_step(self, batch) -> None:
        """One optimizer step on one batch of rollouts; its statistics join the running
        means that the next metrics line reports."""
        correct, rewards = self.reward(batch)
        rows, dropped = self.keep_rows(batch, rewards)
        self.count_generation(batch)
        stats = self.rollout_stats(batch, correct, rewards, rows, dropped)
        if rows:
            stats.update(self.update(batch.rollout, rows, rewards))
        for k, v in stats.items():
            self.acc[k] = self.acc.get(k, 0.0) + v
            self.acc["n/" + k] = self.acc.get("n/" + k, 0) + 1

    def reward(self, batch) -> tuple[list[bool], list[float]]:
        """Verdict and reward of every sample: the verifiable reward plus the length
        control's penalty. Each prompt's pass count feeds the pool (curriculum, NPR)."""
        c, ro, G = self.c, batch.rollout, self.c.rollout.generations_per_prompt
        correct = score(self.task, [self.task.train[i] for i in batch.prompt_ids], self.tok,
                        ro.tokens, G)
        rewards = [(c.reward.correct if ok else c.reward.incorrect) + pen
                   for ok, pen in zip(correct, ro.penalty)]
        for j, pid in enumerate(batch.prompt_ids):
            self.pool.record(pid, sum(correct[j * G:(j + 1) * G]), G)
        return correct, rewards

    def keep_rows(self, batch, rewards: list[float]) -> tuple[list[int], int]:
        """Rows of the prompt groups the zero-variance filter keeps (groups whose samples
        all got the same reward carry no gradient), and how many groups it dropped."""
        G = self.c.rollout.generations_per_prompt
        keep = zero_variance_keep(rewards, G, self.c.data.zero_variance_filter)
        dropped = len(batch.prompt_ids) - len(keep)
        self.counters["zero_variance_dropped"] += dropped
        return [j * G + s for j in keep for s in range(G)], dropped

    def count_generation(self, batch) -> None:
        """Samples and generation FLOPs, including tokens of samples the source discarded."""
        ro = batch.rollout
        self.counters["samples"] += len(ro.tokens)
        self.counters["flops_gen"] += 2.0 * self.n_params * (sum(ro.gen_tokens)
                                                            + batch.dropped_gen_tokens)

    def rollout_stats(self, batch, correct: list[bool], rewards: list[float], rows: list[int],
                      dropped: int) -> dict[str, float]:
        ro = batch.rollout
        stats = {
            "train/reward": sum(rewards) / len(rewards),
            "train/pass_rate": sum(correct) / len(correct),
            "train/truncation_rate": sum(not f for f in ro.finished) / len(ro.finished),
            "train/interrupt_rate": sum(ro.interrupted) / len(ro.interrupted),
            "train/response_len": sum(len(t) for t in ro.tokens) / len(ro.tokens),
            "data/zero_variance_dropped_frac": dropped / len(batch.prompt_ids),
            "time/generation_s": batch.gen_seconds,
        }
        vers = [v for r in rows for v in ro.versions[r]]  # policy version of each kept token
        if vers:
            # Lag: optimizer steps between the weights that sampled a token and the weights
            # it is trained on (0 = on-policy). lag_max is the max over the eval window
            # (evaluate() reports it), lag_mean the mean of the steps' token means.
            lag_max = self.step - min(vers)
            stats["pipeline/lag_mean"] = self.step - sum(vers) / len(vers)
            self.lag_max_window = max(getattr(self, "lag_max_window", 0), lag_max)
            stats["pipeline/staleness_mean"] = stats["pipeline/lag_mean"]  # earlier names
            stats["pipeline/staleness_max"] = lag_max
        return stats

    def update(self, ro, rows: list[int], rewards: list[float]) -> dict:
        """Advantages -> policy loss -> one optimizer step on the kept samples: this rank's
        share of them (groups dealt by tokens), in micro-batches of at most
        engine.micro_batch_tokens whose gradients accumulate into the one step, each token
        weighted with the whole batch's denominators (trainer/microbatch.py)."""
        adv_of = self.advantages(rows, rewards)
        weight_of = rows_token_weights(ro, rows, self.c.rollout.generations_per_prompt,
                                       self.c.loss.aggregation, self.world)
        mine, real = self.my_share(ro, rows)
        micro = self.micro_batches(ro, mine)
        totals = StepTotals()
        self.model.train()  # HF gradient checkpointing (and dropout) act only in train mode
        try:
            for i, (mb, live) in enumerate(micro):
                b = self.loss_batch(ro, mb, adv_of, weight_of if real and live else None)
                logp, ent, n_proc = self.forward(ro, b)
                loss, st = self.policy_loss(logp, b)
                self.engine.backward(loss, boundary=i == len(micro) - 1)
                if real and live:  # a zero-weighted line-up micro-batch counts for nothing
                    totals.add(float(loss.detach()), b.mask, ent, st["mismatch"], st["ratio"],
                               st["clipped"], float(b.packed["attention_mask"].sum()),
                               float(b.packed["attention_mask"].numel()), n_proc)
            gnorm = self.engine.step()
        finally:
            self.model.eval()
        if not math.isfinite(gnorm):
            raise Diverged(self.step + 1)
        stats = self.count_and_average(totals, real, len(micro))
        return {**stats, "train/grad_norm": gnorm, "train/lr": self.engine_lr()}

    def advantages(self, rows: list[int], rewards: list[float]) -> dict[int, float]:
        """Advantage of each kept row, normalized over the whole kept batch (every rank
        computes all of them: batch normalization needs the whole batch)."""
        c, G = self.c, self.c.rollout.generations_per_prompt
        adv = compute_advantages(torch.tensor([rewards[r] for r in rows]),
                                 torch.tensor([r // G for r in rows]),
                                 normalization=c.advantage.normalization, eps=c.advantage.eps)
        return dict(zip(rows, adv.tolist()))

    def my_share(self, ro, rows: list[int]) -> tuple[list[int], bool]:
        """This rank's rows (all of them in one process) and whether they are its own: prompt
        groups are dealt so that ranks carry about equal tokens; a rank dealt none borrows a
        group and trains on it with zero weight (collectives must line up)."""
        if self.world == 1:
            return rows, True
        G = self.c.rollout.generations_per_prompt
        size: dict[int, int] = {}
        for r in rows:
            size[r // G] = size.get(r // G, 0) + len(ro.prompts[r]) + len(ro.tokens[r])
        mine = set(deal_groups(size, self.world)[self.rank])
        if not mine:
            return [r for r in rows if r // G == rows[0] // G], False
        return [r for r in rows if r // G in mine], True

    def micro_batches(self, ro, rows: list[int]) -> list[tuple[list[int], bool]]:
        """`rows` length-bucketed into micro-batches of at most engine.micro_batch_tokens
        padded tokens, each with whether it is live. Every rank runs as many as the rank with
        most (DeepSpeed's collectives run per forward/backward): the others add zero-weighted
        repeats of their longest row."""
        G = self.c.rollout.generations_per_prompt
        lengths = [(len(ro.prompts[r]), len(ro.tokens[r])) for r in rows]
        plan = [([rows[i] for i in mb], True) for mb in plan_micro_batches(
            lengths, self.c.engine.micro_batch_tokens, [r // G for r in rows])]
        most = int(all_reduce_floats([float(len(plan))], self.device, "max")[0])
        return plan + [(plan[0][0][:1], False)] * (most - len(plan))

    def loss_batch(self, ro, rows: list[int], adv_of: dict[int, float],
                   weight_of: dict[int, torch.Tensor] | None) -> LossBatch:
        """The rows padded into tensors: prompt+completion ids, the loss mask (completion
        tokens the loss counts), behaviour log-probs, prompt group and advantage of each row,
        and each token's weight in the loss (`weight_of`; None: all zero)."""
        G = self.c.rollout.generations_per_prompt
        # Micro-batches: rows back to back, right-padded (their padding is what bucketing
        # bounds); one batch: prompts left-padded, completions aligned (shared-prefix forward).
        packer = pack if self.c.engine.micro_batch_tokens is None else pack_right
        packed = packer([ro.prompts[r] for r in rows], [ro.tokens[r] for r in rows],
                        self.tok.pad_token_id)
        T = packed["mask"].shape[1]
        mask = packed["mask"].clone()
        old = torch.zeros_like(mask)
        weight = torch.zeros(mask.shape, dtype=torch.float64)
        for i, r in enumerate(rows):
            n = len(ro.tokens[r])
            mask[i, :n] *= torch.tensor(ro.loss_mask[r], dtype=mask.dtype)
            old[i, :n] = torch.tensor(ro.logprobs[r][:T])
            if weight_of is not None:
                weight[i, :n] = weight_of[r][:T]
        return LossBatch(rows, packed, mask, old, torch.tensor([r // G for r in rows]),
                         torch.tensor([adv_of[r] for r in rows], dtype=torch.float32), weight)

    def forward(self, ro, b: LossBatch) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Log-probs and entropies of the completion tokens under the current weights, and
        the number of token positions the forward processed (for the FLOPs count).

        With micro-batches (engine.micro_batch_tokens) every row runs whole, back to back
        (trainer.model.pack_right): the shared-prefix forward is replaced there, since
        bucketing by length puts a prompt's samples in different micro-batches anyway."""
        c, G, rows = self.c, self.c.rollout.generations_per_prompt, b.rows
        if "start" in b.packed:  # pack_right
            logp, ent = right_padded_logprobs(self.body, self.head, b.packed, self.device,
                                              c.precision.dtype, c.rollout.temperature,
                                              with_entropy=True)
            return logp, ent, int(b.packed["attention_mask"].sum())
        if c.model.gradient_checkpointing:  # recomputation and a grad-carrying KV cache clash
            logp, ent = completion_logprobs(self.body, self.head, b.packed, self.device,
                                            c.precision.dtype, c.rollout.temperature,
                                            with_entropy=True)
            return logp, ent, int(b.packed["attention_mask"].sum())
        # Each prompt's forward/backward shared by its G samples.
        kept = sorted({r // G for r in rows})
        slot = {g: i for i, g in enumerate(kept)}
        uniq = [ro.prompts[g * G] for g in kept]
        logp, ent = shared_prefix_logprobs(
            self.body, self.head, uniq, [slot[r // G] for r in rows], [ro.tokens[r] for r in rows],
            self.tok.pad_token_id, self.device, c.precision.dtype, c.rollout.temperature,
            with_entropy=True)
        n_proc = sum(len(p) for p in uniq) + sum(max(len(ro.tokens[r]) - 1, 0) for r in rows)
        return logp, ent, n_proc

    def policy_loss(self, logp: torch.Tensor, b: LossBatch) -> tuple[torch.Tensor, dict]:
        """This micro-batch's part of the whole batch's loss: the configured loss type's
        per-token terms weighted by `b.weight` (the aggregation's, whole-batch denominators,
        trainer/microbatch.py). A non-finite loss on any rank stops the run on every rank,
        before anyone enters the engine's collectives."""
        dev, cfg = self.device, self.c.loss
        options = {k: getattr(cfg, k) for k in LOSS_OPTIONS[cfg.type]}  # None: the default
        b.mask, b.old_logp = b.mask.to(dev), b.old_logp.to(dev)
        mask = b.mask.to(logp.dtype)
        terms, st = LOSSES.get(cfg.type)(logp, b.old_logp, b.adv.to(dev, logp.dtype)[:, None],
                                         mask, **loss_options(cfg.type, options))
        loss = (terms * b.weight.to(dev, logp.dtype)).sum()
        if all_reduce_floats([float(not torch.isfinite(loss))], dev, "max")[0]:
            raise Diverged(self.step + 1)
        with torch.no_grad():
            st["mismatch"] = (b.old_logp - logp.detach()).abs()
        return loss, st

    def count_and_average(self, t: StepTotals, real: bool, n_micro: int) -> dict:
        """Add the step's tokens and training FLOPs (all ranks) to the counters; the step's
        loss statistics: the loss sums to the global one, the rest is the mean over ranks
        that trained on real data; padding share, micro-batches, and (several ranks) the
        max/mean ratio of the ranks' tokens."""
        dev = self.device
        tokens, flops, slots = all_reduce_floats(
            [t.tokens, 6.0 * self.n_params * t.processed, t.slots], dev)
        self.counters["tokens"] += int(tokens)  # prompt + completion per sample
        self.counters["flops_train"] += flops  # what was actually computed (all ranks)
        m = max(t.loss_tokens, 1.0)
        means = {"train/loss": t.loss, "train/entropy": t.entropy / m,
                 "train/is_ratio_mean": t.ratio / m, "train/clip_frac": t.clipped / m,
                 "train/logprob_mismatch": t.mismatch / m}
        out = {"train/padding_frac": 1.0 - tokens / max(slots, 1.0),
               "train/micro_batches": float(n_micro)}
        if self.world > 1:
            n_real = all_reduce_floats([float(real)], dev)[0]
            vals = all_reduce_floats([v * (real or k == "train/loss") for k, v in means.items()],
                                     dev)
            means = {k: v / (self.world if k == "train/loss" else n_real)
                     for k, v in zip(means, vals)}
            top = all_reduce_floats([t.tokens], dev, "max")[0]
            out["train/rank_tokens_max_over_mean"] = top / max(tokens / self.world, 1.0)
        ratio_max = t.ratio_max if real and t.loss_tokens else 1.0
        ratio_max = all_reduce_floats([ratio_max if real else 0.0], dev, "max")[0]
        return {**means, **out, "train/is_ratio_max": ratio_max}

    def engine_lr(self) -> float:
        if callable(getattr(self.engine, "lr", None)):
            return float(self.engine.lr())
        opt = getattr(self.engine, "optimizer", None)
        return float(opt.param_groups[0]["lr"]) if opt is not None else float("nan")

    @torch.no_grad()
    def evaluate(self, source=None) -> None:
        """mean@k on the held-out prompts; writes one metrics line (the curve's point).

        rollout.backend vllm: through the rollout source's engine, brought up to the trainer's
        weights first; rank 0 alone evaluates (trainer/gen_service.py). hf: the built-in
        sampler on the trainer's weights in eval.batch_size batches. Rank 0 alone evaluates (the
        weights are identical everywhere), except under ZeRO-3 where each rank holds a shard:
        there every rank runs the same evaluation, the sampler decoding in lockstep so the
        per-forward all-gathers line up (trainer/rollout.py `synced`)."""
        c, seed = self.c, self.c.seed * 7919 + 17
        if gen_service.uses_service(c, source):  # None on ranks other than 0
            pr = gen_service.eval_pass_rate(source, self.model, self.step, self.zero3, self.task,
                                            self.eval_problems, self.eval_prompts, c, self.tok,
                                            seed=seed)
        elif self.main or self.zero3:
            gen = HFGenerator(c, self.model, self.tok)  # the trainer's current weights
            was = self.model.training
            self.model.eval()
            pr = pass_rate(gen, self.task, self.eval_problems, self.eval_prompts, c, self.tok,
                           seed=seed, k=c.eval.samples_per_prompt,
                           temperature=c.eval.temperature, batch_rows=c.eval.batch_size)
            self.model.train(was)
        else:
            pr = None
        if pr is None:
            self.acc = {}
            return
        k_ = self.counters
        row = {"step": self.step, "samples": k_["samples"], "tokens": k_["tokens"],
               "flops": k_["flops_gen"] + k_["flops_train"], "gpu_hours": self.gpu_hours(),
               "eval/pass_rate": pr,
               "flops/generation": k_["flops_gen"], "flops/training": k_["flops_train"],
               "data/zero_variance_dropped": k_["zero_variance_dropped"],
               "data/npr_retired": len(self.pool.retired), "data/epoch": self.pool.epoch,
               "time/wall_s": k_["wall"]}
        for key in [x for x in self.acc if not x.startswith("n/")]:
            row[key] = self.acc[key] / self.acc["n/" + key]
        if "pipeline/lag_mean" in row:
            row["pipeline/lag_max"] = self.__dict__.pop("lag_max_window", 0)
        if source is not None and hasattr(source, "stale_dropped"):
            row["pipeline/stale_dropped"] = source.stale_dropped
            row["pipeline/wait_s"] = source.wait_seconds
        self.acc = {}
        if self.main:
            rundir.append_metrics(self.dir, row)
            trackers.log_metrics(c, self.dir, row)  # TensorBoard / W&B / MLflow, if chosen
