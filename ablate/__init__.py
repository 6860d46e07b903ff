"""ablate: run RL recipe ablations and compare them by their fitted scaling curves (ScaleRL)."""

__version__ = "0.1.0"
