"""What a job's vLLM engines are sent, and the sentence saying where they run: the memory
plan's view of the engines (memory.py sizes each engine's KV cache for the sequences it really
decodes; time_plan.py its decode rate).

Where the engines run is the job's topology (topology.py, the one statement the trainer's
binding also reads): with vLLM every node's local rank 0 starts its node's engines and
generates its node's share of each generate call, the call's prompt groups dealt over the
nodes (`shares`: the first groups % nodes nodes one group more; trainer/generation/
feeders.py): a step's rollout.prompts_per_step in pipeline mode, a big generation's k x
prompts_per_step in ppo_off_policy (`dealt_groups`). So the rollouts decode on nodes x
replicas engines; with several nodes every eval decodes on all of them at its step's weights,
rollouts paused and training waiting (trainer/loop/final_eval.py; `fleet_eval`), on one node
on rank 0's engines beside the rollouts (rank 0's eval service, trainer/generation/
eval_service.py, pins.py).
A job holds GPUs it may leave idle (an engine set smaller than the node's generation GPUs,
fewer tasks than training GPUs): counted in gpu_hours all the same, and said here.

Pure Python (no torch): `ablate sweep --dry-run` plans thousands of variants with it.
"""

from __future__ import annotations

import math

from trainer.config import TrainConfig
from trainer.counted import count
from trainer.plan.topology import JobShape, Topology


def shares(per_step: int, count: int) -> list[int]:
    """A step's prompt groups dealt over `count` generating nodes, in node order
    (trainer/generation/feeders.py deals them so): per_step // count each, the first
    per_step % count one more; [5] * 8 + [4] * 2 for the paper's 48 over 10 nodes. Every node
    gets at least one where per_step >= count (trainer/validate.py refuses fewer)."""
    q, r = divmod(per_step, max(1, count))
    return [q + (1 if j < r else 0) for j in range(max(1, count))]


def dealt_groups(c: TrainConfig) -> int:
    """Prompt groups one generation of the job deals over its nodes: a step's
    (rollout.prompts_per_step, pipeline mode) or a big generation's, k steps' at once
    (ppo_off_policy: trainer/generation/offpolicy.py PPOOffPolicy)."""
    k = 1 if c.off_policy.mode == "pipeline" else c.off_policy.k
    return c.rollout.prompts_per_step * k


def largest_share(c: TrainConfig, nodes: int = 1) -> int:
    """Prompt groups of a generation (`dealt_groups`) the busiest node makes (the first
    node's share): the generation waits for its last group, so the plan charges every node
    this share."""
    return shares(dealt_groups(c), nodes)[0]


def rollout_rows(c: TrainConfig, nodes: int = 1) -> int:
    """Sequences one node's rollout generate call sends (trainer/generation/offpolicy.py):
    pipeline, a call of off_policy.groups_per_call (default the node's share of a step, the
    largest where prompts_per_step does not divide over the nodes) groups; ppo_off_policy, the
    node's share of one big generation of k x prompts_per_step prompts; G samples each."""
    g = c.rollout.generations_per_prompt
    share = max(1, largest_share(c, nodes))
    if c.off_policy.mode == "pipeline":
        return (c.off_policy.groups_per_call or share) * g
    return share * g


def eval_rows(c: TrainConfig) -> int:
    """Sequences the held-out eval sends the engines (trainer/generation/eval_service.py: the
    whole eval, one call on GPUs)."""
    return (c.eval.num_prompts or c.task.num_eval_prompts) * c.eval.samples_per_prompt


def fleet_eval(c: TrainConfig, t: Topology) -> bool:
    """Evals decode on every engine of every node with rollouts paused, training waiting
    (trainer/loop/final_eval.py: vLLM on several nodes, each node's feeder over its own
    engines; ppo_off_policy has no rollouts in flight between its steps); elsewhere on rank
    0's engines (pinned, eval_engines)."""
    return (c.rollout.backend == "vllm" and (t.engine_nodes >= 2 or t.roles)
            and bool(t.engines))


def eval_engines(replicas: int) -> int:
    """Engines of rank 0's node an eval pins at its step's weights (trainer/generation/
    pins.py): half of the node's `replicas`, at least one. Why half: generation-bound, an eval
    costs the same wall whatever it pins (its tokens displace rollout tokens on this node
    either way: time_plan.py eval_cost_s), and at E = R/2 it ends before the next is due
    exactly when it did on all R engines shared (it takes R/E as long, the steps meanwhile
    R/(R-E) as long); training-bound, the node's rollouts on R - E engines may still keep up,
    costing nothing, which pinning more would not. One engine is shared (pins.py)."""
    return max(1, replicas // 2)


def rows_per_engine(c: TrainConfig, t: Topology) -> int:
    """Sequences each engine of rank 0's node (the busiest) is sent at once at most: its
    node's rollout call over the node's replicas, plus eval, which goes to rank 0's node's
    engines only. In pipeline mode eval's requests join the running rollout call's (rank 0's
    eval service and its node's generator share the engines); in ppo_off_policy eval runs
    between steps, never beside the big generation."""
    rows = rollout_rows(c, t.engine_nodes)
    if fleet_eval(c, t):  # the eval dealt over every node's engines, beside rollouts in flight
        gen, ev = rows / len(t.engines), eval_rows(c) / (len(t.engines) * t.engine_nodes)
        return math.ceil(gen + ev if c.off_policy.mode == "pipeline" else max(gen, ev))
    rows = rows + eval_rows(c) if c.off_policy.mode == "pipeline" else max(rows, eval_rows(c))
    return math.ceil(rows / len(t.engines))


def _where(c: TrainConfig, t: Topology, gpus: int) -> str:
    """Where the engines run and what they serve (the placement sentence's first half)."""
    replicas, nodes = len(t.engines), t.engine_nodes
    n = count(replicas, "vLLM engine")
    size = ("" if gpus < 2 else f" of {t.tp} GPUs (tensor parallel)" if t.tp > 1 else
            f" of 1 GPU{' each' if replicas > 1 else ''}")
    if nodes > 1 or t.roles:
        host = ("on each node's local rank 0's GPU, shared with its trainer rank" if gpus == 1
                else "on each node's local rank 0's machine" if not gpus else "on every node")
        if t.roles:
            host = f"on each of {nodes} generation node{'s' if nodes > 1 else ''}"
        dealt = shares(dealt_groups(c), nodes)
        share = (f"{dealt[0]}" if dealt[0] == dealt[-1] else f"{dealt[-1]}-{dealt[0]}")
        of = (f"a step's {c.rollout.prompts_per_step}" if c.off_policy.mode == "pipeline" else
              f"each generation's {dealt_groups(c)} ({c.off_policy.k} steps', then "
              f"{c.off_policy.k} training steps)")
        total = (f" ({nodes} nodes, {nodes * replicas} in all)" if not t.roles else
                 f" ({nodes * replicas} in all; the other {t.training_nodes} node"
                 f"{'s' if t.training_nodes > 1 else ''} train, {t.training_ranks} ranks)")
        return (f"{n}{size} {host}{total} serve the "
                f"job's rollouts, each node {share} of {of} prompt groups, and every eval, "
                f"all of them at the step's weights with rollouts paused")
    where = ("on rank 0's node" if gpus >= 2 else
             "on rank 0's GPU, shared with its trainer rank" if gpus else "on rank 0's machine")
    verb = "serves" if replicas == 1 else "serve"
    return f"{n}{size} {where} {verb} the job's rollouts and eval"


def client_in_host(client: str, own_gpus: bool) -> bool:
    """Whether the engines' client (their vLLM clients, the stream's drivers, the eval streams)
    runs in an engine host process beside the rank that starts them, rather than in that rank
    (rollout.vllm.client; trainer/generation/host.py): `auto` where the engines have GPUs of
    their own. The one rule, for the dry run's sentence and the trainer's start alike."""
    return client == "process" or (client == "auto" and own_gpus)


def placement_note(c: TrainConfig, shape: JobShape, t: Topology) -> str:
    """One sentence: where the engines run (and their client), and the GPUs the job holds but
    leaves idle."""
    gpus = shape.gpus_per_node or 0
    text = _where(c, t, gpus)
    if t.roles:  # trainer/generation/node_host.py: one host a generation node, one feeder each
        feeders = "rank 0" if t.generation_nodes == 1 else f"ranks 0-{t.generation_nodes - 1}"
        text += (f", each node's driven from an engine host process there, fed over the "
                 f"network by one training rank ({feeders})")
    elif t.engines and client_in_host(c.rollout.vllm.client, bool(gpus) and t.own_gpus):
        text += ", driven from an engine host process beside the rank that starts them"
    first, other = (t.idle_gpus(0), t.idle_gpus(1)) if gpus >= 2 else (0, 0)
    if t.roles:  # training nodes and generation nodes each alike; said in the layout line
        idle = t.training_nodes * t.idle_gpus(0) + t.engine_nodes * t.idle_gpus(shape.nodes - 1)
        return text if not idle else (f"{text}; {idle} of the job's {shape.nodes * gpus} GPUs "
                                      "are idle: held and counted in gpu_hours")
    idle = first + (shape.nodes - 1) * other
    if not idle:
        return text
    where_idle = [f"{first} on rank 0's node"] if first else []
    if other and shape.nodes > 1:
        where_idle.append(f"{other} on {'the other node' if shape.nodes == 2 else 'each other node'}")
    why, gen, used = [], len(t.generation), len(t.engines) * t.tp
    if t.own_gpus and used < gen:
        node = "each node's" if t.engine_nodes > 1 else "rank 0's node's"
        why.append(f"{count(len(t.engines), 'engine')} x tensor_parallel_size {t.tp} use {used} "
                   f"of {node} {gen} generation GPUs")
    if shape.ranks_per_node < len(t.training):
        why.append(f"tasks_per_node={shape.ranks_per_node} starts fewer ranks than the node's "
                   f"{len(t.training)} training GPUs")
    return (f"{text}; {idle} of the job's {shape.nodes * gpus} GPUs are idle "
            f"({', '.join(where_idle)}): held and counted in gpu_hours, but no rank or engine "
            f"runs there ({'; '.join(why)})")
