"""Which ranks generate a step's rollouts, and how a step's batch is put together from them.

Why: with vLLM (trainer/plan/topology.py separate_generation) each node's local
rank 0 is bound to its own node's engines (binding.py plan_binding). If only rank 0 fed the
trainer, every other node's generation GPUs would be held and idle: half the generation of a
2-node job. So every node's local rank 0 is a *feeder*: it runs the pipeline's generator over
its node's engines and makes its share of each step's prompt groups: a step's prompts are
dealt over the nodes like cards (`shares`: prompts_per_step // nodes each, the first
prompts_per_step % nodes nodes one more; the paper's 48 over 10 nodes: 5 x 8 and 4 x 2), so
no `prompts_per_step % nodes` rule binds a layout; the plan charges the largest share
(trainer/plan/placement.py largest_share). The step's batch is the feeders' shares joined in
node order, the same on every rank (an all-gather). Each feeder draws its prompts from the
shared pool as a stride (share j keeps every nodes-th prompt of a draw of nodes x n, starting
at j): every draw is a multiple of `nodes` long, so share j only ever takes stream positions
= j mod nodes, whatever n each call has; the shares never overlap and, together, take the
pool's order as one feeder would, with no messages between feeders (a node with the smaller
share walks its stride a little slower: by a step's end it is one prompt behind). (Not exact with
data.no_positive_resampling or curriculum pass_rate: a node orders a new epoch from the pass
rates recorded when its own generator reaches it, the same records read at different moments
under wall timing, so in that epoch two nodes may draw one prompt. Syncing it would make a
generator wait for the trainer at each epoch's end; not done.) Every feeder pushes
the trainer's weights into its own engines after each step (one ZeRO-3 gather per parameter on
every rank, as before: trainer/generation/push.py). Eval stays on rank 0's node's engines.

ppo_off_policy has the same feeders, each generating its node's share of a big generation
(k steps' prompts: trainer/generation/offpolicy.py PPOOffPolicy, which joins the shares
itself). With hf, or on one node, rank 0 alone feeds.

Node roles (trainer/plan/topology.py: whole nodes generate): generation node j is fed by
training rank j (Topology.fed_node), which drives that node's engine host over the network
(trainer/generation/node_host.py); the shares and the join are the same, dealt over the
generation nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from trainer.dist.binding import current_binding, job_topology
from trainer.dist.groups import all_gather_objects, broadcast_object, rank
from trainer.plan.placement import shares
from trainer.plan.topology import JobShape, separate_generation
from trainer.validate import ConfigConflict, prompts_per_node


@dataclass(frozen=True)
class Feeders:
    """The ranks that generate (node order) and this rank's place among them."""

    ranks: tuple[int, ...]
    me: int  # this rank
    per_step: int = 1  # rollout.prompts_per_step, dealt over the ranks (`shares`)

    @property
    def share(self) -> int | None:
        """This rank's share index (its node's), None on a rank that does not generate."""
        return self.ranks.index(self.me) if self.me in self.ranks else None

    @property
    def count(self) -> int:
        return len(self.ranks)

    @property
    def groups(self) -> int | None:
        """Prompt groups this rank's node makes of each step (None: not a feeder)."""
        return None if self.share is None else self.size_of(self.share)

    @property
    def largest(self) -> int:
        """The largest share (the first node's): what a step waits for, the plan's charge."""
        return shares(self.per_step, self.count)[0]

    def size_of(self, share: int) -> int:
        return shares(self.per_step, self.count)[share]


def feeders(config) -> Feeders:
    """Every node's local rank 0 in pipeline mode with vLLM, else rank 0 alone. Collective
    (every rank must call it, in the same place): the ranks' own bindings are gathered, so
    the answer never rests on assuming equal node sizes."""
    if not separate_generation(config):
        return Feeders((0,), rank(), config.rollout.prompts_per_step)
    t = job_topology(config)
    if t.roles:  # generation node j fed by training rank j (Topology.fed_node), node order
        return Feeders(tuple(range(t.generation_nodes)), rank(), config.rollout.prompts_per_step)
    leader = current_binding(config).local_rank == 0
    flags = all_gather_objects(leader)
    ranks = tuple(r for r, f in enumerate(flags) if f) or (0,)
    # The start-up check (trainer/validate.py) counts nodes from the launcher's layout; this
    # holds the same rule to the feeders really found, so no feeder is dealt nothing.
    why = prompts_per_node(config, JobShape(nodes=len(ranks)))
    if why:
        raise ConfigConflict(why)
    return Feeders(ranks, rank(), config.rollout.prompts_per_step)


def strided(draw: list[int], share: int, count: int) -> list[int]:
    """This share's prompts of a draw of count x n from the pool (every count-th, from share)."""
    return draw[share::count]


def step_batch(mine, ranks: tuple[int, ...], stop: str, join: Callable[[list], object]):
    """The step's batch on every rank: rank 0's, broadcast, or with several feeders their shares
    joined in node order by `join` (trainer/generation/offpolicy.py concat) after an all-gather.
    `mine` is this rank's share (None on a rank that does not feed) or `stop` (a stop signal
    inside its generation); if any feeder stopped, every rank gets `stop`."""
    if ranks == (0,):
        return broadcast_object(mine)
    every = all_gather_objects(mine)
    parts = [every[r] for r in ranks]
    if any(isinstance(p, str) and p == stop for p in parts):
        return stop
    return join(parts)
