"""How each allreduce algorithm runs on TensorFlow's collective ops: stages of collectives over sub-groups.

One bucket's allreduce over replicas ``0..n-1`` (``nodes[r]``: replica
``r``'s node) is a short sequence of :class:`Stage`; every stage runs one
collective per group, all groups at once, and the next stage starts on what
the last one left:

- ``ring``: one allreduce over every replica;
- ``hierarchical``: a reduce-scatter inside each node (every replica keeps
  one of ``G`` shards), an allreduce of each shard across the nodes (one group
  per local rank), an all-gather inside each node; every node needs the same
  ``G`` replicas;
- ``master``: an allreduce inside each node (TensorFlow has no rooted reduce:
  ``CollectiveReduceV2`` gives every member the sum, and the master's is the
  one used), an allreduce among the nodes' masters (each node's first replica),
  a broadcast from the master inside each node.

Where an algorithm cannot differ from the ring (one node, or one replica per
node) its stages are the ring's: :func:`distinct_algorithms` says which
algorithms a cluster can tell apart.  Groups list their members in the order
TensorFlow ranks them (by task name, which sorts ``task:10`` before
``task:2``), so a reduce-scatter's shard ``k`` is the one of each node's
``k``-th member.  The runtime (launcher.runtime.collective) issues these
stages and the communication model (cost_models.comm) prices them.
"""

from __future__ import annotations

from typing import NamedTuple

from autodist.errors import PlacementError

STAGE_OPS = ("allreduce", "reduce_scatter", "all_gather", "broadcast")
FIRST_SUB_GROUP_KEY = 3  # 1 and 2: every replica's gradient and set-up groups (launcher.runtime.collective)


class Stage(NamedTuple):
    """One collective ``op`` per group of ``groups`` (replica indices, in TensorFlow's rank order; a broadcast's
    source first); ``shards``: the parts a reduce-scatter cuts the bucket into (1: none)."""

    op: str
    groups: tuple
    shards: int = 1

    def size(self, nbytes):
        """The bytes of one collective of this stage for a bucket of ``nbytes``, as nccl-tests counts them (a
        reduce-scatter's input, an all-gather's output): one shard for an allreduce of shards, else all."""
        return nbytes / self.shards if self.op == "allreduce" else nbytes


def tf_rank_order(ranks):
    """``ranks`` (replica indices, which are task indices) in the order TensorFlow ranks a group's members."""
    return tuple(sorted(ranks, key=lambda r: f"task:{r}"))


def node_groups(nodes):
    """The replicas of each node, nodes in first-seen order, members in TensorFlow's rank order."""
    groups = {}
    for r, node in enumerate(nodes):
        groups.setdefault(node, []).append(r)
    return [tf_rank_order(g) for g in groups.values()]


def _ring(nodes):
    return (Stage("allreduce", (tf_rank_order(range(len(nodes))),)),)


def _degenerate(nodes):
    """Whether every algorithm is the ring on ``nodes``: one node, or one replica per node."""
    groups = node_groups(nodes)
    return len(groups) == 1 or all(len(g) == 1 for g in groups)


def _hierarchical(nodes):
    groups = node_groups(nodes)
    sizes = sorted({len(g) for g in groups})
    if len(sizes) > 1:
        raise PlacementError("hierarchical allreduce needs as many replicas on every node, got "
                             f"{', '.join(str(len(g)) for g in groups)} on {len(groups)} nodes (use ring or master)")
    shards = sizes[0]
    across = tuple(tf_rank_order(g[k] for g in groups) for k in range(shards))
    return (Stage("reduce_scatter", tuple(groups), shards), Stage("allreduce", across, shards),
            Stage("all_gather", tuple(groups), shards))


def _master(nodes):
    groups = node_groups(nodes)
    inside = tuple(g for g in groups if len(g) > 1)
    masters = tf_rank_order(min(g) for g in groups)
    # the broadcast's source (the master: the node's first replica) first
    sources = tuple((min(g), *(r for r in g if r != min(g))) for g in inside)
    return (Stage("allreduce", inside), Stage("allreduce", (masters,)), Stage("broadcast", sources))


BUILDERS = {"ring": _ring, "hierarchical": _hierarchical, "master": _master}


def stages(algorithm, nodes):
    """The stages of ``algorithm`` over replicas on ``nodes`` (the ring's where the algorithm cannot differ);
    PlacementError where it cannot run (hierarchical on nodes of different replica counts)."""
    if algorithm not in BUILDERS:
        raise PlacementError(f"unknown allreduce algorithm {algorithm!r} (one of {', '.join(BUILDERS)})")
    if len(nodes) < 2:
        return ()
    return _ring(nodes) if _degenerate(nodes) else BUILDERS[algorithm](nodes)


def distinct_algorithms(nodes):
    """The algorithms that run differently on replicas on ``nodes``, and why the others are not among them:
    ``(algorithms, {left out: reason})``."""
    if _degenerate(nodes):
        why = "one node" if len(set(nodes)) == 1 else "one replica per node"
        return ("ring",), {a: f"the same as ring on {why}" for a in BUILDERS if a != "ring"}
    out, left = [], {}
    for algorithm in BUILDERS:
        try:
            BUILDERS[algorithm](nodes)
            out.append(algorithm)
        except PlacementError as exc:
            left[algorithm] = str(exc)
    return tuple(out), left


def group_keys(nodes):
    """``{group: group key}`` of every sub-group any algorithm uses on ``nodes`` (not the group of all
    replicas), numbered from FIRST_SUB_GROUP_KEY in a fixed order: the same in every replica."""
    everyone = tf_rank_order(range(len(nodes)))
    groups = set()
    for algorithm in BUILDERS:
        try:
            found = stages(algorithm, nodes)
        except PlacementError:
            continue
        groups.update(tf_rank_order(g) for stage in found for g in stage.groups)
    groups.discard(everyone)
    return {g: FIRST_SUB_GROUP_KEY + i for i, g in enumerate(sorted(groups))}
