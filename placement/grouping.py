"""Coarsen a GraphItem's ops into op groups, so big graphs stay searchable.

Two levels:

- a *unit* is what a strategy places (``Strategy.group_slots`` keys): the ops
  of one name scope (backward ops under ``gradient_tape/`` join the scope of
  the forward op they differentiate), with a variable's handle and read ops
  colocated with the op that consumes the value;
- a *group* is what the simulator schedules: consecutive ops of one unit in
  one pass (forward or backward).  A unit's pass is split into several
  groups where keeping it whole would close a cycle (see :func:`group_ops`),
  so groups form a DAG and every group belongs to exactly one unit.

Optimizer-update ops (phase ``"update"``) are not grouped: the simulator runs
them after each variable's synchronisation (see ``placement.simulator``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import heapq

from autodist.errors import PlacementError

DEFAULT_MAX_UNITS = 512
TAPE_PREFIX = "gradient_tape/"


@dataclass
class OpGroup:
    """Ops of one unit in one pass, scheduled as a whole on one device."""

    name: str
    unit: str
    ops: list = field(default_factory=list)


@dataclass
class GroupGraph:
    """The group DAG of one GraphItem.

    ``groups`` are in topological order; ``edges`` maps ``(i, j)`` group
    indices to the bytes flowing from group ``i`` to group ``j``;
    ``gradient_group`` maps each trainable variable to the index of the group
    whose end makes its gradient ready, and ``read_group`` to the first group
    that reads it (which waits for its pull from a PS); ``update_ops`` lists
    the optimizer ops the simulator charges per variable.
    """

    groups: list
    edges: dict
    units: list
    gradient_group: dict
    read_group: dict
    update_ops: list

    def predecessors(self):
        preds = [[] for _ in self.groups]
        for (i, j), nbytes in self.edges.items():
            preds[j].append((i, nbytes))
        return preds

    def successors(self):
        succs = [[] for _ in self.groups]
        for (i, j), nbytes in sorted(self.edges.items()):
            succs[i].append((j, nbytes))
        return succs

    def unit_of_variable(self, name):
        """The unit that holds a variable's gradient (and so its home device)."""
        return self.groups[self.gradient_group[name]].unit


def _scope_parts(op, scope_of):
    """Name-scope components of ``op``; a gradient op takes its forward op's scope.

    TensorFlow names a gradient op ``gradient_tape/<forward op>/<grad op>``,
    so the scope after the prefix is the forward op's name.
    """
    scope = op.scope if op.scope else op.name.rpartition("/")[0]
    if scope.startswith(TAPE_PREFIX):
        scope = scope[len(TAPE_PREFIX):]
        scope = scope_of.get(scope, scope.rpartition("/")[0] or scope)
    return [p for p in scope.split("/") if p] or [op.name]


def _choose_depth(parts, max_units):
    """Deepest scope depth whose number of distinct keys stays <= max_units."""
    best = 1
    for depth in range(1, max((len(p) for p in parts), default=1) + 1):
        keys = {"/".join(p[:depth]) for p in parts}
        if len(keys) > max_units:
            break
        best = depth
    return best


def _colocate_variables(graph_item, unit_of):
    """Move each variable's handle and read ops to the unit that consumes them."""
    consumers = {}
    for op in graph_item.ops.values():
        for tensor in op.inputs:
            src = tensor.lstrip("^").rpartition(":")[0] or tensor.lstrip("^")
            consumers.setdefault(src, []).append(op.name)
    for var in graph_item.variables.values():
        reads = [r for r in var.read_ops if r in unit_of]
        owned = set(reads) | {var.handle_op}
        for read in reads:
            users = [c for c in consumers.get(read, ()) if c not in owned and c in unit_of]
            if users:
                unit_of[read] = unit_of[users[0]]
        if var.handle_op in unit_of and reads:
            unit_of[var.handle_op] = unit_of[reads[0]]


def _topological(graph_item, ops):
    """``ops`` in a topological order of their data and control edges (stable)."""
    index = {op.name: i for i, op in enumerate(ops)}
    preds = [[] for _ in ops]
    succs = [[] for _ in ops]
    for i, op in enumerate(ops):
        for tensor in op.inputs:
            src, nbytes = graph_item._edge(tensor)
            j = index.get(src)
            if j is not None and j != i:
                preds[i].append((j, nbytes))
                succs[j].append(i)
    remaining = [len(p) for p in preds]
    ready = [i for i, n in enumerate(remaining) if n == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for k in succs[i]:
            remaining[k] -= 1
            if remaining[k] == 0:
                heapq.heappush(ready, k)
    if len(order) != len(ops):
        stuck = next(ops[i].name for i, n in enumerate(remaining) if n)
        raise PlacementError(f"the step graph has a cycle through op {stuck!r}")
    return order, preds


def group_ops(graph_item, max_units=DEFAULT_MAX_UNITS):
    """Coarsen ``graph_item`` into a :class:`GroupGraph`.

    Ops are visited in topological order; an op joins the open group of its
    (unit, pass) unless one of its inputs comes from a group opened later,
    in which case it opens a new group of that unit.  Every edge so goes
    from an earlier group to a later one: the groups form a DAG.

    Parameters
    ----------
    graph_item : autodist.graph.item.GraphItem
    max_units : int
        Upper bound on placement units; the scope depth is the deepest that
        stays under it.

    Returns
    -------
    GroupGraph
    """
    ops = [op for op in graph_item.ops.values() if op.phase != "update"]
    scope_of = {op.name: op.scope if op.scope else op.name.rpartition("/")[0] for op in graph_item.ops.values()}
    parts = {op.name: _scope_parts(op, scope_of) for op in ops}
    depth = _choose_depth(parts.values(), max_units)
    unit_of = {name: "/".join(p[:depth]) for name, p in parts.items()}
    _colocate_variables(graph_item, unit_of)

    order, preds = _topological(graph_item, ops)
    groups, open_group, opened, group_at = [], {}, {}, [0] * len(ops)
    for i in order:
        op = ops[i]
        key = (unit_of[op.name], "backward" if op.phase == "backward" else "forward")
        latest = max((group_at[j] for j, _ in preds[i]), default=-1)
        g = open_group.get(key, -1)
        if g < latest or g < 0:
            g = len(groups)
            count = opened[key] = opened.get(key, 0) + 1
            suffix = f"#{count}" if count > 1 else ""
            groups.append(OpGroup(name=f"{key[0]}:{key[1]}{suffix}", unit=key[0]))
            open_group[key] = g
        group_at[i] = g
        groups[g].ops.append(op.name)
    group_of = {ops[i].name: group_at[i] for i in range(len(ops))}
    op_edges = [(ops[j].name, ops[i].name, nbytes) for i in range(len(ops)) for j, nbytes in preds[i]]

    edges = {}
    for src_op, dst_op, nbytes in op_edges:
        i, j = group_of[src_op], group_of[dst_op]
        if i != j:
            edges[(i, j)] = edges.get((i, j), 0) + nbytes

    gradient_group, read_group = {}, {}
    for var in graph_item.trainable_variables():
        producers = [graph_item._edge(t)[0] for t in var.gradients]
        readers = [group_of[r] for r in var.read_ops if r in group_of]
        indices = [group_of[p] for p in producers if p in group_of] or readers
        gradient_group[var.name] = max(indices) if indices else len(groups) - 1
        read_group[var.name] = min(readers, default=0)

    units = sorted({g.unit for g in groups})
    update_ops = [op.name for op in graph_item.ops.values() if op.phase == "update"]
    return GroupGraph(groups, edges, units, gradient_group, read_group, update_ops)
