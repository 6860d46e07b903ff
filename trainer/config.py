"""TrainConfig: every knob of one RL run, with the ScaleRL recipe as the defaults.

Plain data (pydantic v2, `extra="forbid"` everywhere so a typo is an error, not a silent
default). Section names are the dotted prefixes that study YAMLs use as axes, e.g.
`loss.type`, `loss.aggregation`, `advantage.normalization`, `off_policy.mode`. The sections
are defined by area in trainer/config_parts/ (model, generation, loss, training, schedule);
this module assembles them and is the one import path for all of them.

Sources: ScaleRL = Khatri et al., "The Art of Scaling RL Compute for LLMs", arXiv 2510.13786
(Khatri et al., arXiv 2510.13786). DAPO = Yu et al. 2025 (arXiv 2503.14476). GSPO = Zheng et al. 2025
(arXiv 2507.18071). CISPO = MiniMax-M1 (arXiv 2506.13585). PipelineRL = Piche et al. 2025.

Each Literal names registered implementations (trainer registries): the loss types,
aggregations and advantage normalizations are read from their registries
(trainer/config_parts/loss.py); a test checks that the other names and their registries
agree. This module imports pydantic and those torch-free registries only, so that `ablate` can
validate thousands of variants quickly without importing torch.
"""

from __future__ import annotations

from pydantic import Field

from trainer.config_parts.base import Strict
from trainer.config_parts.generation import LengthConfig, RolloutConfig, VLLMConfig
from trainer.config_parts.loss import AdvantageConfig, LossConfig
from trainer.config_parts.model import (
    TASK_KINDS,
    ModelConfig,
    PrecisionConfig,
    ProxyModelConfig,
    RewardConfig,
    TaskConfig,
)
from trainer.config_parts.schedule import (
    BudgetConfig,
    CheckpointConfig,
    EvalConfig,
    LoggingConfig,
)
from trainer.config_parts.training import DataConfig, EngineConfig, OffPolicyConfig, OptimConfig

__all__ = [
    "TASK_KINDS", "AdvantageConfig", "BudgetConfig", "CheckpointConfig",
    "DataConfig", "EngineConfig", "EvalConfig", "LengthConfig", "LoggingConfig", "LossConfig",
    "ModelConfig", "OffPolicyConfig", "OptimConfig", "PrecisionConfig", "ProxyModelConfig",
    "RewardConfig", "RolloutConfig", "TaskConfig", "TrainConfig", "VLLMConfig",
]



class TrainConfig(Strict):
    """One RL run. Defaults are the ScaleRL recipe."""

    seed: int = Field(0, description="Seed of sampling, init and data order for this run.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    precision: PrecisionConfig = Field(default_factory=PrecisionConfig)
    task: TaskConfig = Field(default_factory=TaskConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    length: LengthConfig = Field(default_factory=LengthConfig)
    loss: LossConfig = Field(default_factory=LossConfig)
    advantage: AdvantageConfig = Field(default_factory=AdvantageConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    off_policy: OffPolicyConfig = Field(default_factory=OffPolicyConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    budget: BudgetConfig = Field(default_factory=lambda: BudgetConfig(steps=2000))
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
