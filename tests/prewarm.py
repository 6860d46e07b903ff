"""Build the warmed proxies most of the slow tier shares into $ABLATE_CACHE, beside the rest
of the set-up and the fast tier (tests/run.sh): the set-up waits on downloads and the fast
tier keeps one of the machine's two cores busy, so a core has minutes to spare, and each
warm-up (1 thread: ~2-3 min for the recipe's proxy) is then off the slow tier's clock.

The models are the tests' own, built through the same cache key and file lock
(trainer/policy.py proxy_path): a test that needs one while it is being built waits for it;
one this list misses is built by the first test that needs it, as before. Nothing here
decides a test's outcome.

Usage: ABLATE_CACHE=DIR python3 tests/prewarm.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The recipe's proxy (tests/_trainer_util.py tiny(): the trainer, two-node, one-engine and
# benchmark runs) and the multi-rank tests' TINY_PROXY (tests/_multirank_util.py).
CONFIGS = ("__import__('_trainer_util').config(__import__('_trainer_util').tiny())",
           "__import__('_microbatch_script').config('torch', 0, 'token', None)")


def main() -> None:
    import torch

    torch.set_num_threads(1)  # the fast tier has the other core
    from trainer.policy import proxy_path

    for expr in CONFIGS:
        t = time.time()
        print(f"prewarm: {proxy_path(eval(expr))} in {time.time() - t:.0f} s", flush=True)


if __name__ == "__main__":
    main()
