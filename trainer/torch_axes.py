"""The registries of the three axes whose implementations import torch: `engine.type`,
`off_policy.mode`, `rollout.backend`.

Each name is registered here with where its implementation lives (`module:name`), imported on
its first `get`, so this module imports no torch and the config, which `ablate` validates
without torch, reads the allowed names from here (trainer/config_parts/: `Literal[tuple(
REGISTRY.names())]`), in the order registered (what a validation error lists as valid). A new
value of one of these axes is its implementation in the module of that axis plus its line
here; the torch-free axes (trainer/algo/, trainer/tasks.py) register with a decorator beside
the function instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from trainer.registry import Registry

if TYPE_CHECKING:  # types only: the modules they live in import torch
    from trainer.engine import Engine
    from trainer.generation.offpolicy import Context, Source
    from trainer.rollouts import Generator

# (config, model) -> the optimizer engine
ENGINES: Registry[Callable[..., Engine]] = Registry("engine.type")
ENGINES.register_lazy("torch", "trainer.engine:make_torch_engine")
ENGINES.register_lazy("deepspeed", "trainer.engine_deepspeed:make_deepspeed_engine")

# (Context) -> the step's batch source. pipeline_data.py's `pipeline` picks the data-timed source or offpolicy.py's free-running one
# by rollout.async_timing.
MODES: Registry[Callable[[Context], Source]] = Registry("off_policy.mode")
MODES.register_lazy("pipeline", "trainer.generation.pipeline_data:pipeline")
MODES.register_lazy("ppo_off_policy", "trainer.generation.offpolicy:PPOOffPolicy")

# (config, model, tokenizer) -> a Generator
BACKENDS: Registry[Callable[..., Generator]] = Registry("rollout.backend")
BACKENDS.register_lazy("hf", "trainer.generation.rollout:HFGenerator")
BACKENDS.register_lazy("vllm", "trainer.generation.host:make_vllm_generator")
