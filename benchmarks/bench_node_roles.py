"""Scale-out by the plan: the paper recipe on 1-12 nodes a run, the best layout of each kind
(every node split alike; whole nodes generate and whole nodes train: trainer/plan/topology.py
roles_topology) and the one `rollout.vllm.generation_gpus: auto` chooses among both
(trainer/plan/split_choice.py), all planned by the memory and time plans the dry run prints.

Plans only (no GPU, no trainer): the numbers are the dry run's, on sweeps/slurm_gpu.yaml with
`slurm.nodes` set to each count (its limits: 4-h jobs, requeues as derived).

    python benchmarks/bench_node_roles.py                            # the table (docs/cluster.md)
    python benchmarks/bench_node_roles.py --set tensor_parallel_size=2   # a rollout.vllm key set
    python benchmarks/bench_node_roles.py --json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

import yaml

from ablate.studies.launch.profile import load_profile
from ablate.studies.launch.slurm_profile import job_shape, limits
from trainer.config import TrainConfig
from trainer.plan.split_choice import choose_split, with_split
from trainer.plan.time_plan import dur, plan_time

ROOT = Path(__file__).resolve().parents[1]
NODES = (1, 2, 3, 4, 6, 8, 10, 12)


def _row(c: TrainConfig, shape, lim, g: int, n: int) -> dict:
    t = plan_time(with_split(c, g, n), shape, lim)
    layout = (f"{n} gen + {shape.nodes - n} train nodes" if n else
              f"{g}/{shape.gpus_per_node - g} per node")
    return {"layout": layout, "step_s": t.step_s, "generation_s": t.generation_s,
            "train_s": t.train_s, "eval_s": t.eval_s, "wall_h": t.wall_h,
            "gpu_hours": t.gpu_hours, "reaches": t.reaches_budget}


def table(vllm: dict) -> list[dict]:
    tree = yaml.safe_load((ROOT / "recipes" / "scalerl.yaml").read_text())
    tree["rollout"].setdefault("vllm", {}).update(vllm)
    c = TrainConfig.model_validate(tree)
    prof = load_profile(ROOT / "sweeps" / "slurm_gpu.yaml")
    lim, rows = limits(prof), []
    for nodes in NODES:
        shape = replace(job_shape(prof), nodes=nodes)
        ch = choose_split(c, shape, roles=True)  # every candidate: what `auto` chooses
        split = choose_split(c, shape, roles=False).chosen()  # the best per-node split
        best = ch.best_roles()
        rows.append({"nodes": nodes, "split": _row(c, shape, lim, split.generation_gpus, 0),
                     "roles": best and _row(c, shape, lim, best.generation_gpus,
                                            best.generation_nodes),
                     "auto": "roles" if ch.generation_nodes else "split"})
    return rows


def _cells(r: dict) -> str:
    return (f"{r['layout']} | {dur(r['step_s'])} ({r['step_s']:.0f} s) | {dur(r['eval_s'])} | "
            f"{r['wall_h']:,.0f} | {r['gpu_hours']:,.0f} | {'yes' if r['reaches'] else 'NO'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=INT",
                    help="a rollout.vllm key set for every run (e.g. tensor_parallel_size=2)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    vllm = {k: int(v) for k, v in (s.split("=", 1) for s in a.set)}
    rows = table(vllm)
    if a.json:
        print(json.dumps(rows))
        return
    print("| nodes | best split per node | step | eval | wall h | GPU-h | reach "
          "| best node roles | step | eval | wall h | GPU-h | reach | auto takes |")
    print("|---" * 14 + "|")
    for r in rows:
        roles = _cells(r["roles"]) if r["roles"] else "- (one node) | | | | |"
        auto = "node roles" if r["auto"] == "roles" else "split per node"
        print(f"| {r['nodes']} | {_cells(r['split'])} | {roles} | {auto} |")


if __name__ == "__main__":
    main()
