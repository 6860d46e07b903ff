"""Per-batch data filter: zero-variance filtering (ScaleRL).

A prompt group whose samples all got the same reward has zero advantage everywhere and so no
gradient; it is dropped from the batch (not resampled) and counted in the metrics.
"""

from __future__ import annotations


def zero_variance_keep(rewards: list[float], group_size: int, enabled: bool = True) -> list[int]:
    """Indices of the prompt groups to keep (groups are consecutive runs of `group_size`)."""
    n = len(rewards) // group_size
    if not enabled:
        return list(range(n))
    return [j for j in range(n) if len(set(rewards[j * group_size:(j + 1) * group_size])) > 1]
