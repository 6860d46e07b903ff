"""The CPU proxy's supervised warm-up: teacher-forced steps on the task until the held-out pass
rate, measured the way eval measures it (the hf sampler, trainer/evaluate.py pass_rate), lies in
the target band, so RL starts from a known, non-zero pass rate (`build_proxy`).

Above the model (trainer/models/proxy.py builds the untrained one) and the generation service
(its measurement samples): trainer/policy.py caches what this builds.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn

from trainer.config import LengthConfig, PrecisionConfig, RolloutConfig, TrainConfig
from trainer.evaluate import pass_rate
from trainer.generation.rollout import HFGenerator
from trainer.models.logprobs import completion_logprobs, pack
from trainer.models.precision import LMHead
from trainer.models.proxy import WARMUP_VERSION, WarmupError, new_proxy, warmup_task_config
from trainer.tasks import build_task

# The warm-up's stopping rule measures with a fixed sampling seed, like eval does.
WARMUP_EVAL_SEED = 20251014


def build_proxy(config: TrainConfig):
    """The proxy (models/proxy.py new_proxy), warmed up on the task to its target pass rate."""
    p = config.model.proxy
    model, tok = new_proxy(config)
    if p.warmup_target is not None:
        log = supervised_warmup(model, tok, build_task(warmup_task_config(config)), config)
        # Saved in config.json: where this model starts, and how it got there.
        model.config.ablate_warmup = {"version": WARMUP_VERSION, "target": p.warmup_target,
                                      "band": p.warmup_band, "steps": log.steps,
                                      "pass_rate": log.pass_rate, "checks": log.checks}
    model.eval()
    return model, tok


@dataclass
class WarmupLog:
    """Where the warm-up stopped: (step, measured pass rate) at every check."""

    checks: list[tuple[int, float]] = field(default_factory=list)

    @property
    def steps(self) -> int:
        return self.checks[-1][0]

    @property
    def pass_rate(self) -> float:
        return self.checks[-1][1]


class _Warmup:
    """The warm-up's state (model, optimizer, batch sampler) and its moves: measure the held-out
    pass rate, train some steps, take a snapshot and go back to one."""

    def __init__(self, model: nn.Module, tok, task, config: TrainConfig) -> None:
        p = config.model.proxy
        self.model, self.task, self.tok, self.batch_size = model, task, tok, p.warmup_batch_size
        self.g = torch.Generator().manual_seed(config.task.data_seed)
        enc = lambda s: tok(s, add_special_tokens=False).input_ids
        self.prompts = [enc(x.prompt) for x in task.train]
        self.targets = [enc(task.target(x)) + [tok.eos_token_id] for x in task.train]
        self.problems = task.eval[: p.warmup_eval_prompts]
        self.eval_prompts = [enc(x.prompt) for x in self.problems]
        # Measured with plain sampling (no length control) and an answer-sized cap, so every
        # variant's settings share one warmed model; a run whose eval is held-out mean@16 at
        # temperature 1 measures the same quantity at its first point (the CPU proxy recipe's
        # own eval scores its RL pool near-greedily: another quantity).
        longest = max(len(enc(task.target(x))) for x in self.problems)
        self.measure_cfg = config.model_copy(update={
            "precision": PrecisionConfig(dtype="fp32"),
            "length": LengthConfig(control="none"),
            "rollout": RolloutConfig(backend="hf", max_new_tokens=longest + 2)})
        # Constant LR, no schedule: the state at any step is a valid place to stop.
        self.opt = torch.optim.AdamW(model.parameters(), lr=p.warmup_lr, weight_decay=0.0)
        self.body = model.get_decoder()
        self.head = LMHead(model.get_output_embeddings(), fp32=True)

    def measure(self) -> float:
        self.model.eval()
        gen = HFGenerator(self.measure_cfg, self.model, self.tok)
        return pass_rate(gen, self.task, self.problems, self.eval_prompts, self.measure_cfg,
                         self.tok, seed=WARMUP_EVAL_SEED, k=16, temperature=1.0)

    def train(self, n: int) -> None:
        self.model.train()
        for _ in range(n):
            idx = torch.randint(len(self.prompts), (self.batch_size,), generator=self.g).tolist()
            b = pack([self.prompts[i] for i in idx], [self.targets[i] for i in idx],
                     self.tok.pad_token_id)
            logp, _ = completion_logprobs(self.body, self.head, b, torch.device("cpu"), "fp32")
            loss = -(logp * b["mask"]).sum() / b["mask"].sum()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
            self.opt.step(), self.opt.zero_grad(set_to_none=True)

    def snapshot(self) -> tuple:
        return (copy.deepcopy(self.model.state_dict()), copy.deepcopy(self.opt.state_dict()),
                self.g.get_state())

    def restore(self, snap: tuple) -> None:
        ms, os_, gs = snap
        self.model.load_state_dict(ms), self.opt.load_state_dict(os_), self.g.set_state(gs)


def supervised_warmup(model: nn.Module, tok, task, config: TrainConfig,
                      on_check=None) -> WarmupLog:
    """Teacher-forced steps on (prompt, answer+EOS) pairs until the held-out pass rate, measured
    the way eval measures it, lies in the target band.

    Why a measured target: the warm-up's learning curve is steep (a fixed step count lands
    anywhere from 0.05 to 0.5 depending on the machine's floating-point path), so where RL
    starts must be measured, not assumed. Checks are spaced by the measured slope (far from
    the band: long strides; near it: short ones); a check above the band restores the last
    state below it and retries with shorter strides, so the band cannot be stepped over.
    """
    p = config.model.proxy
    target, band = p.warmup_target, p.warmup_band
    w = _Warmup(model, tok, task, config)
    log, step, stride, trained, cap = WarmupLog(), 0, 100, 0, 100
    below = None  # (step, snapshot) of the last checked state below the band
    while True:
        rate = w.measure()
        log.checks.append((step, rate))
        if on_check is not None:
            on_check(step, rate)
        if abs(rate - target) <= band:
            return log
        if rate > target + band:
            if below is None:
                raise WarmupError(
                    f"model.proxy.warmup_target: the model's pass rate is {rate:.3f} before any "
                    f"warm-up, above the band {target} +- {band}; raise warmup_target")
            step = below[0]
            w.restore(below[1])
            cap = max(1, stride // 4)  # strides never again reach the one that overshot
            stride = cap
        else:
            slope = _slope(log.checks)
            stride = cap if slope <= 0 else int(min(cap, max(2, 0.5 * (target - rate) / slope)))
            below = (step, w.snapshot())
        if step + stride > p.warmup_max_steps or trained + stride > 2 * p.warmup_max_steps:
            best = max(r for _, r in log.checks)
            raise WarmupError(
                f"model.proxy: the supervised warm-up reached a held-out pass rate of {best:.3f} "
                f"at most in {p.warmup_max_steps} steps (warmup_max_steps), never the band "
                f"{target} +- {band}; raise warmup_max_steps or warmup_lr, or lower warmup_target")
        w.train(stride)
        step += stride
        trained += stride


def _slope(checks: list[tuple[int, float]]) -> float:
    """Pass-rate gain per step over the last two checks that moved forward in steps."""
    for (s0, r0), (s1, r1) in zip(reversed(checks[:-1]), reversed(checks[1:])):
        if s1 > s0:
            return (r1 - r0) / (s1 - s0)
    return 0.0


