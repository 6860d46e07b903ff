"""The training loop, top to bottom: pool -> generate -> reward -> filter -> advantages ->
loss -> step -> weight push -> eval + metrics + checkpoint. One function, `run`.
"""

from __future__ import annotations

import math
import random
import tempfile
import time
import traceback
from pathlib import Path

import torch

from trainer import rundir
from trainer.advantages import compute_advantages
from trainer.config import TrainConfig
from trainer.engine import make_engine
from trainer.filters import zero_variance_keep
from trainer.length import generate_rollout
from trainer.losses import policy_loss_with_stats
from trainer.model import (completion_logprobs, load_model, pack, pick_device,
                           shared_prefix_logprobs)
from trainer.offpolicy import MODES, Context
from trainer.pool import PromptPool
from trainer.precision import LMHead
from trainer.rollout import HFGenerator
from trainer.tasks import build_task


class Diverged(Exception):
    pass


def run(config: TrainConfig, run_dir: Path) -> None:
    """Train (or resume) one run into `run_dir`. Returns when the budget is spent, or the run
    diverged (status.json says so with the step); raises after marking status `failed`."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    rundir.write_config(run_dir, config)
    # A diverged run stays diverged (its last good checkpoint is kept for inspection). A done
    # run resumes like any other: with an unchanged budget it finishes at once, with a larger
    # one it continues from its checkpoint.
    if rundir.read_status(run_dir).get("state") == "diverged" and \
            rundir.checkpoint_dir(run_dir) is not None:
        return
    step = 0
    try:
        state = _Run(config, run_dir)
        step = state.step
        state.train()
    except Diverged as e:
        rundir.write_status(run_dir, "diverged", int(str(e)), reason="non-finite loss or grad")
    except BaseException as e:
        rundir.write_status(run_dir, "failed", step, error=f"{type(e).__name__}: {e}",
                            traceback=traceback.format_exc()[-4000:])
        raise


class _Run:
    """State of one run; methods are the loop's stages in the order they happen."""

    def __init__(self, config: TrainConfig, run_dir: Path) -> None:
        self.c, self.dir = config, run_dir
        torch.set_flush_denormal(True)  # tiny models hit denormals: 10-50x slower CPU ops
        if config.engine.threads:
            torch.set_num_threads(config.engine.threads)
        torch.manual_seed(config.seed)
        random.seed(config.seed)
        self.device = pick_device(config.engine.device)
        model, self.tok = load_model(config)
        self.task = build_task(config.task)
        enc = self.encode
        self.train_prompts = [enc(p.prompt) for p in self.task.train]
        n_eval = config.eval.num_prompts or config.task.num_eval_prompts
        self.eval_problems = self.task.eval[:n_eval]
        self.eval_prompts = [enc(p.prompt) for p in self.eval_problems]
        self.engine = make_engine(config, model.to(self.device))
        self.model = self.engine.model
        self.head = LMHead(self.model.get_output_embeddings(), config.precision.trainer_lm_head_fp32)
        self.body = self.model.get_decoder()
        self.n_params = sum(p.numel() for p in self.model.parameters())
        self.pool = PromptPool([p.difficulty for p in self.task.train], config.data, config.seed)
        self.step = 0
        self.counters = {"samples": 0, "tokens": 0, "flops_gen": 0.0, "flops_train": 0.0,
                         "wall": 0.0, "zero_variance_dropped": 0, "gen_counter": 0}
        self.acc: dict[str, float] = {}
        self._resume()
        self.ctx = Context(config, self.model, self.tok, self.pool, self.train_prompts,
                           self.counters["gen_counter"])
        self.loss_kw = {"eps_low": config.loss.eps_low, "eps_high": config.loss.eps_high,
                        "eps_max": config.loss.eps_max}

    def encode(self, prompt: str) -> list[int]:
        """Prompt text -> ids; real chat models get their chat template (model.chat_template)."""
        if self.c.model.chat_template:
            return self.tok.apply_chat_template([{"role": "user", "content": prompt}],
                                                add_generation_prompt=True, tokenize=True)
        return self.tok(prompt, add_special_tokens=False).input_ids

    # -- resume / checkpoint -------------------------------------------------------------
    def _resume(self) -> None:
        for stale in self.dir.glob("checkpoint.tmp-*"):
            import shutil

            shutil.rmtree(stale, ignore_errors=True)
        ck = rundir.checkpoint_dir(self.dir)
        if ck is None:
            rundir.truncate_metrics(self.dir, None)
            return
        self.engine.load(ck / "engine")
        s = torch.load(ck / "state.pt", weights_only=False)
        self.step, self.counters, self.acc = s["step"], s["counters"], s["acc"]
        self.pool.load_state_dict(s["pool"])
        torch.set_rng_state(s["torch_rng"])
        random.setstate(s["py_rng"])
        rundir.truncate_metrics(self.dir, self.step)

    def checkpoint(self) -> None:
        self.counters["gen_counter"] = self.ctx.gen_counter
        tmp = Path(tempfile.mkdtemp(dir=self.dir, prefix="checkpoint.tmp-"))
        self.engine.save(tmp / "engine")
        torch.save({"step": self.step, "counters": dict(self.counters), "acc": dict(self.acc),
                    "pool": self.pool.state_dict(), "torch_rng": torch.get_rng_state(),
                    "py_rng": random.getstate()}, tmp / "state.pt")
        rundir.commit_checkpoint(self.dir, tmp)

    # -- the loop ------------------------------------------------------------------------
    def train(self) -> None:
        c = self.c
        rundir.write_status(self.dir, "running", self.step, total_steps=c.budget.steps)
        if self.step == 0 and not rundir.read_metrics(self.dir):
            self.evaluate()
            self.checkpoint()
        source = MODES.get(c.off_policy.mode)(self.ctx)
        source.after_step(self.model, self.step)  # resumed: stamp generator with this version
        try:
            while not self.budget_spent():
                t0 = time.perf_counter()
                batch = source.next(self.step)
                self.train_step(batch)
                self.step += 1
                source.after_step(self.model, self.step)
                self.counters["wall"] += time.perf_counter() - t0
                rundir.write_status(self.dir, "running", self.step, total_steps=c.budget.steps)
                last = self.budget_spent()
                if self.step % c.eval.every_steps == 0 or last:
                    self.evaluate(source)
                    self.checkpoint()
                elif self.step % c.checkpoint.every_steps == 0:
                    self.checkpoint()
        finally:
            source.close()
        rundir.write_status(self.dir, "done", self.step, total_steps=c.budget.steps)

    def budget_spent(self) -> bool:
        b, k = self.c.budget, self.counters
        return ((b.steps is not None and self.step >= b.steps)
                or (b.gpu_hours is not None and self.gpu_hours() >= b.gpu_hours)
                or (b.flops is not None and k["flops_gen"] + k["flops_train"] >= b.flops))

    def gpu_hours(self) -> float:
        """Device-hours: train-loop wall (eval and checkpoints excluded) x devices in the job
        (the world size under torch.distributed, else 1; a CPU counts as one device)."""
        import torch.distributed as dist

        devices = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        return self.counters["wall"] * devices / 3600

    def train_step(self, batch) -> None:
        c, ro, G = self.c, batch.rollout, self.c.rollout.generations_per_prompt
        # Verifiable reward (+penalty from the length control).
        texts = self.tok.batch_decode([[t for t in toks if t != self.tok.eos_token_id]
                                       for toks in ro.tokens], skip_special_tokens=True)
        correct = [self.task.score(self.task.train[batch.prompt_ids[i // G]], t)
                   for i, t in enumerate(texts)]
        rewards = [(c.reward.correct if ok else c.reward.incorrect) + pen
                   for ok, pen in zip(correct, ro.penalty)]
        for j, pid in enumerate(batch.prompt_ids):
            self.pool.record(pid, sum(correct[j * G:(j + 1) * G]), G)
        # Zero-variance filter: groups with identical rewards carry no gradient; drop them.
        keep = zero_variance_keep(rewards, G, c.data.zero_variance_filter)
        dropped = len(batch.prompt_ids) - len(keep)
        self.counters["zero_variance_dropped"] += dropped
        rows = [j * G + s for j in keep for s in range(G)]
        n_tok = sum(len(p) + len(t) for p, t in zip(ro.prompts, ro.tokens))
        self.counters["samples"] += len(ro.tokens)
        self.counters["flops_gen"] += 2.0 * self.n_params * n_tok
        stats = {
            "train/reward": sum(rewards) / len(rewards),
            "train/pass_rate": sum(correct) / len(correct),
            "train/truncation_rate": sum(not f for f in ro.finished) / len(ro.finished),
            "train/interrupt_rate": sum(ro.interrupted) / len(ro.interrupted),
            "train/response_len": sum(len(t) for t in ro.tokens) / len(ro.tokens),
            "data/zero_variance_dropped_frac": dropped / len(batch.prompt_ids),
            "time/generation_s": batch.gen_seconds,
        }
        vers = [v for r in rows for v in ro.versions[r]]
        if vers:
            stats["pipeline/staleness_mean"] = self.step - sum(vers) / len(vers)
            stats["pipeline/staleness_max"] = self.step - min(vers)
        if rows:
            stats.update(self.update(ro, rows, rewards))
        for k, v in stats.items():
            self.acc[k] = self.acc.get(k, 0.0) + v
            self.acc["n/" + k] = self.acc.get("n/" + k, 0) + 1

    def update(self, ro, rows: list[int], rewards: list[float]) -> dict:
        """Advantages -> policy loss -> one optimizer step on the kept samples."""
        c = self.c
        G = c.rollout.generations_per_prompt
        b = pack([ro.prompts[r] for r in rows], [ro.tokens[r] for r in rows], self.tok.pad_token_id)
        T = b["mask"].shape[1]
        mask = b["mask"].clone()
        old = torch.zeros_like(mask)
        for i, r in enumerate(rows):
            n = len(ro.tokens[r])
            mask[i, :n] *= torch.tensor(ro.loss_mask[r], dtype=mask.dtype)
            old[i, :n] = torch.tensor(ro.logprobs[r][:T])
        group = torch.tensor([r // G for r in rows])
        adv = compute_advantages(torch.tensor([rewards[r] for r in rows]), group,
                                 normalization=c.advantage.normalization, eps=c.advantage.eps)
        dev = self.device
        if c.model.gradient_checkpointing:  # recomputation and a grad-carrying KV cache clash
            logp, ent = completion_logprobs(self.body, self.head, b, dev, c.precision.dtype,
                                            c.rollout.temperature, with_entropy=True)
            n_proc = int(b["attention_mask"].sum())
        else:  # each prompt's forward/backward shared by its G samples
            kept = sorted({r // G for r in rows})
            slot = {g: i for i, g in enumerate(kept)}
            uniq = [ro.prompts[g * G] for g in kept]
            logp, ent = shared_prefix_logprobs(
                self.body, self.head, uniq, [slot[r // G] for r in rows],
                [ro.tokens[r] for r in rows], self.tok.pad_token_id, dev, c.precision.dtype,
                c.rollout.temperature, with_entropy=True)
            n_proc = sum(len(p) for p in uniq) + sum(max(len(ro.tokens[r]) - 1, 0) for r in rows)
        mask, old = mask.to(dev), old.to(dev)
        loss, st = policy_loss_with_stats(logp, old, adv.to(dev), mask, group.to(dev),
                                          loss_type=c.loss.type, aggregation=c.loss.aggregation,
                                          **self.loss_kw)
        if not torch.isfinite(loss):
            raise Diverged(self.step + 1)
        gnorm = self.engine.step(loss)
        if not math.isfinite(gnorm):
            raise Diverged(self.step + 1)
        self.counters["tokens"] += int(b["attention_mask"].sum())  # prompt + completion per sample
        self.counters["flops_train"] += 6.0 * self.n_params * n_proc  # what was actually computed
        m = mask.sum().clamp(min=1)
        with torch.no_grad():
            mismatch = float(((old - logp.detach()).abs() * mask).sum() / m)
        return {"train/loss": float(loss.detach()), "train/grad_norm": gnorm,
                "train/entropy": float((ent * mask).sum() / m),
                "train/is_ratio_mean": st["is_ratio_mean"], "train/is_ratio_max": st["is_ratio_max"],
                "train/clip_frac": st["clip_frac"], "train/logprob_mismatch": mismatch,
                "train/lr": self.engine_lr()}

    def engine_lr(self) -> float:
        if callable(getattr(self.engine, "lr", None)):
            return float(self.engine.lr())
        opt = getattr(self.engine, "optimizer", None)
        return float(opt.param_groups[0]["lr"]) if opt is not None else float("nan")

    @torch.no_grad()
    def evaluate(self, source=None) -> None:
        """mean@k on the held-out prompts; writes one metrics line (the curve's point)."""
        c = self.c
        gen = HFGenerator(c, self.model, self.tok)  # the trainer's current weights
        was = self.model.training
        self.model.eval()
        k, chunk, correct, total = c.eval.samples_per_prompt, 64, 0, 0
        for a in range(0, len(self.eval_prompts), chunk):
            ro = generate_rollout(gen, self.eval_prompts[a:a + chunk], c, self.tok,
                                  seed=c.seed * 7919 + 17, n=k, temperature=c.eval.temperature)
            texts = self.tok.batch_decode([[t for t in toks if t != self.tok.eos_token_id]
                                           for toks in ro.tokens], skip_special_tokens=True)
            correct += sum(self.task.score(self.eval_problems[a + i // k], t)
                           for i, t in enumerate(texts))
            total += len(texts)
        self.model.train(was)
        k_ = self.counters
        row = {"step": self.step, "samples": k_["samples"], "tokens": k_["tokens"],
               "flops": k_["flops_gen"] + k_["flops_train"], "gpu_hours": self.gpu_hours(),
               "eval/pass_rate": correct / max(total, 1),
               "flops/generation": k_["flops_gen"], "flops/training": k_["flops_train"],
               "data/zero_variance_dropped": k_["zero_variance_dropped"],
               "data/npr_retired": len(self.pool.retired), "data/epoch": self.pool.epoch,
               "time/wall_s": k_["wall"]}
        for key in [x for x in self.acc if not x.startswith("n/")]:
            row[key] = self.acc[key] / self.acc["n/" + key]
        if source is not None and hasattr(source, "stale_dropped"):
            row["pipeline/stale_dropped"] = source.stale_dropped
            row["pipeline/wait_s"] = source.wait_seconds
        self.acc = {}
        rundir.append_metrics(self.dir, row)
