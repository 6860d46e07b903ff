"""The job around the trainer's processes: the process group and collectives (groups), which
GPUs and engines each process gets (binding, read from trainer/plan/topology.py), a failing
rank ending the whole job (abort), and stop signals (preempt).

    groups.py    the launcher's variables (Slurm, torchrun) -> torch.distributed; collectives
    binding.py   CUDA_VISIBLE_DEVICES of every process, set before CUDA starts
    abort.py     a rank that fails ends every rank within seconds, its cause in status.json
    preempt.py   stop signals (a requeue's warning, Ctrl-C): noted, and acted on at safe points
"""
