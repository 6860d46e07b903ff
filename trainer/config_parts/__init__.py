"""The sections of TrainConfig, one module per area; trainer/config.py assembles them and is the
one import path (`from trainer.config import TrainConfig, LossConfig, ...`).

Why split: one file of every knob grew past what reads in one sitting; each module here holds
the sections one part of the trainer reads. Like trainer/config.py, these modules import no
torch (ablate validates thousands of variants without it): pydantic, and the torch-free
registries whose names they accept (trainer/algo/, trainer/tasks.py, trainer/torch_axes.py;
trainer/registry.py).

Which YAML section lives in which module:
    model.py        model (+ model.proxy), precision, task, reward
    generation.py   rollout (+ rollout.vllm), length
    loss.py         loss, advantage
    training.py     data, off_policy, optim, engine
    schedule.py     eval, budget, checkpoint, logging
    base.py         the strict pydantic base every section derives from
"""
