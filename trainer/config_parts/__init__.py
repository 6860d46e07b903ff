"""The sections of TrainConfig, one module per area; trainer/config.py assembles them and is the
one import path (`from trainer.config import TrainConfig, LossConfig, ...`).

Why split: one file of every knob grew past what reads in one sitting; each module here holds
the sections one part of the trainer reads. Like trainer/config.py, these modules import only
pydantic (ablate validates thousands of variants without importing torch).
"""
