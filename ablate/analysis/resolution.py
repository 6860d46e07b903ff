"""The smallest difference in asymptote A a study can resolve between two variants, from its
seeds: what `ablate sweep --within` says its proposal buys (ablate/studies/sizing.py).

A documented rule, not a simulation of the study (its curves do not exist yet):

1. One run's fitted A scatters around its recipe's A with a standard deviation of
   SIGMA_A_ONE_RUN = A_MARGIN / 1.96 = 0.0102. Sources, which agree: the paper (arXiv 2510.13786:
   three independent ScaleRL runs gave A within +-0.015, so it takes +-0.02 as the margin on
   A, read here as a 95% half-width), and this project's own benchmark (benchmarks/RESULTS.md
   headline: 300 synthetic single runs with the paper's evaluation noise, 1,000 prompts x 16
   samples, AR(1) run drift, gave a median 95% interval of A 0.041 wide, i.e. sd 0.0105).
2. A variant run with k seeds is fit on all of them (its A is about the mean of k runs): sd
   sigma / sqrt(k); two variants' difference: sigma * sqrt(2 / k).
3. Resolved = detected by a 5% two-sided test with 80% power, the usual sizing of a
   comparison: (z_0.975 + z_0.80) * sigma * sqrt(2 / k). 1 seed: 0.040; 2: 0.029; 3: 0.023;
   4: 0.020; 5: 0.018.

What it leaves out, said with the number: sigma is the spread of runs that reach the paper's
stage budgets with the fit window well inside them (a run stopped near C_mid pins A worse, so
below the paper's ~3.5k GPU-hours the margin is a lower bound); and `ablate compare` reads A's
closer than A_MARGIN (0.02, `--margin`) from B at a shared A, so seeds beyond the first k whose
margin reaches A_MARGIN (MAX_USEFUL_SEEDS) do not sharpen its verdict on A.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from ablate.analysis import A_MARGIN

LEVEL = 0.95  # two-sided
POWER = 0.80
SIGMA_A_ONE_RUN = A_MARGIN / NormalDist().inv_cdf(1 - (1 - LEVEL) / 2)
_Z = NormalDist().inv_cdf(1 - (1 - LEVEL) / 2) + NormalDist().inv_cdf(POWER)


def a_margin(seeds: int) -> float:
    """The smallest true difference in A between two variants of `seeds` seeds each that a
    5% two-sided test detects 80% of the time (see the module doc for its sources)."""
    return _Z * SIGMA_A_ONE_RUN * math.sqrt(2.0 / max(1, seeds))


def useful_seeds() -> int:
    """The fewest seeds whose margin reaches A_MARGIN: more do not sharpen compare's A verdict."""
    k = 1
    while a_margin(k) > A_MARGIN:
        k += 1
    return k


MAX_USEFUL_SEEDS = useful_seeds()

# What the margin means, and where its numbers come from, as the proposal says them.
MEANS = "the smallest difference in A between two variants found 4 times in 5 at 95%"
SOURCE = (f"one run's A sd {SIGMA_A_ONE_RUN:.4f}: the paper's +-{A_MARGIN:g} and this project's "
          "single-run intervals; ablate/analysis/resolution.py")
HOW = f"{MEANS} ({SOURCE})"
