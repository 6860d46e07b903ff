"""One rank of a 2-process ZeRO-3 job on CPU (gloo), launched by tests/test_pipeline_stream.py
with Slurm-style variables: rank 0 reads the full weights for a push to vLLM
(push.named_weights, one all-gather per parameter) while rank 1, which holds no
generator in pipeline mode, joins each gather (push.join_weight_gathers). Without the
join rank 0 would wait forever in its first gather. Writes rank 0's max difference between the
pushed tensors and the parameters gathered all at once.
Usage: python tests/_gather_rank_script.py WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def config():
    from _multirank_util import TINY_PROXY
    from trainer.config import TrainConfig

    return TrainConfig.model_validate({
        "seed": 0, "model": {"proxy": TINY_PROXY}, "precision": {"dtype": "fp32"},
        "task": {"num_train_prompts": 2000, "num_eval_prompts": 64},
        "rollout": {"backend": "vllm"}, "off_policy": {"mode": "pipeline"},
        "engine": {"type": "deepspeed", "zero_stage": 3, "device": "cpu", "threads": 1},
    })


if __name__ == "__main__":
    import torch
    import torch.distributed as dist

    from trainer.engine_deepspeed import import_deepspeed, make_deepspeed_engine
    from trainer.policy import load_model
    from trainer.generation.push import join_weight_gathers
    from trainer.generation.push import named_weights as _named_weights

    deepspeed = import_deepspeed()
    work, rank = Path(sys.argv[1]), int(os.environ["SLURM_PROCID"])
    model, _ = load_model(config())
    m = make_deepspeed_engine(config(), model).model
    pushed = dict(_named_weights(m, torch.float32)) if rank == 0 else join_weight_gathers(m)
    with deepspeed.zero.GatheredParameters(list(m.parameters()), modifier_rank=None):
        full = {n: p.detach().clone() for n, p in m.named_parameters()}

    import signal

    from trainer.dist import preempt
    from trainer.generation import push

    preempt.install(signal.SIGUSR2)
    if rank == 1:  # the signal after this rank's third gather of the next push
        real, gathers = push._zero3_full, []

        def gather(p):
            out = real(p)
            gathers.append(1)
            if len(gathers) == 3:
                os.kill(os.getpid(), signal.SIGUSR2)
            return out

        push._zero3_full = gather
    cut = [n for n, _ in _named_weights(m, torch.float32)] if rank == 0 else join_weight_gathers(m)
    dist.barrier()  # a rank left in a gather would never get here
    seen = {"requested": preempt.requested(), "signal": preempt.signal_name()}
    (work / f"stop{rank}.json").write_text(json.dumps(seen))
    if rank == 0:
        partitioned = sum(1 for p in m.parameters() if p.numel() == 0)
        diff = max(float((pushed[n] - t).abs().max()) for n, t in full.items())
        (work / "gather.json").write_text(json.dumps(
            {"partitioned": partitioned, "names": sorted(pushed) == sorted(full), "diff": diff,
             "cut": len(cut), "params": len(full)}))
    dist.barrier()
    # Both ranks are done (rank 0 wrote its result before the barrier). Leave without C++
    # teardown: a CI run once saw rank 1 abort at exit ("terminate called without an active
    # exception", a thread of the gloo/DeepSpeed CPU backend still joinable when its owner
    # was destroyed), after every check had passed.
    sys.stdout.flush()
    os._exit(0)
