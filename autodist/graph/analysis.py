"""Graph analysis on OpInfo records: phases, gradients, updates and slots.

Works on plain data (no TensorFlow), so a captured step and a loaded GraphDef
go through the same rules:

* backward: ops under a gradient scope (``gradient_tape/`` in TF2, ``gradients/``
  in TF1 graphs);
* update: ops that write a variable (Assign*, ResourceApply*, ResourceScatter*,
  ResourceSparseApply*) and the ops only they need;
* forward: ops the backward pass needs (the model and the loss);
* other: the rest (returned loss, metrics bookkeeping, no-ops).
"""

from __future__ import annotations

import re
from collections import deque

from autodist.graph.item import VariableInfo

UPDATE_PREFIXES = ("Assign", "ResourceApply", "ResourceScatter", "ResourceSparseApply")
SPARSE_UPDATE_PREFIXES = ("ResourceScatter", "ResourceSparseApply")
READ_TYPES = ("ReadVariableOp",)
GATHER_TYPES = ("GatherV2", "Gather", "ResourceGather", "SparseSegmentSum", "SparseSegmentMean")
# Ops whose output i is their input i (gradients pass through them to the optimizer).
PASS_THROUGH = ("Identity", "IdentityN")

_BACKWARD_SCOPE = re.compile(r"(^|/)(gradient_tape|gradients)(_\d+)?/")


def is_backward_name(name):
    return bool(_BACKWARD_SCOPE.search(name))


def is_update_type(op_type):
    return op_type.startswith(UPDATE_PREFIXES) and op_type != "AssertGuard"


def _producer(tensor):
    return tensor.lstrip("^").rpartition(":")[0] or tensor.lstrip("^")


def _ancestors(ops, starts, blocked=frozenset(), control=True):
    """Names of ops reachable backwards from ``starts`` (excluded), not entering ``blocked``."""
    seen = set()
    queue = deque(starts)
    while queue:
        name = queue.popleft()
        op = ops.get(name)
        if op is None:
            continue
        for tensor in op.inputs if control else op.data_inputs:
            src = _producer(tensor)
            if src not in seen and src not in blocked and src in ops:
                seen.add(src)
                queue.append(src)
    return seen


def assign_phases(ops):
    """Set ``op.phase`` on every OpInfo of the dict ``ops`` (name -> OpInfo)."""
    backward = {n for n in ops if is_backward_name(n)}
    updates = {n for n, op in ops.items() if is_update_type(op.type)}
    if backward:
        forward = _ancestors(ops, backward, blocked=backward, control=False)
        update = updates | _ancestors(ops, updates, blocked=backward | forward, control=False)
    else:  # no gradients in the graph (e.g. a serving signature): all but writes is the model
        forward = set(ops) - updates
        update = updates
    for name, op in ops.items():
        if name in backward:
            op.phase = "backward"
        elif name in update:
            op.phase = "update"
        elif name in forward:
            op.phase = "forward"
        else:
            op.phase = "other"


def _consumers(ops):
    table = {}
    for op in ops.values():
        for i, tensor in enumerate(op.inputs):
            if not tensor.startswith("^"):
                table.setdefault(_producer(tensor), []).append((op, i))
    return table


def _gradient_frontier(ops, update_ops, handle_tensor):
    """Backward-phase tensors that flow into ``update_ops`` (the gradient the update used).

    The walk follows data edges, maps ``IdentityN`` outputs to their own input,
    and stops at variable reads and at the first backward op on each path.
    """
    found = set()
    seen = set()
    queue = deque(t for name in update_ops for t in ops[name].data_inputs if t != handle_tensor)
    while queue:
        tensor = queue.popleft()
        if tensor in seen:
            continue
        seen.add(tensor)
        src = _producer(tensor)
        op = ops.get(src)
        if op is None or op.type in READ_TYPES or op.type == "Placeholder":
            continue
        if op.phase == "backward":
            found.add(tensor)
            continue
        if op.type == "IdentityN":
            index = int(tensor.rpartition(":")[2])
            queue.append(op.data_inputs[index])
        else:
            queue.extend(op.data_inputs)
    return found


def _slot_key(name):
    return name.replace("/", "_")


def _match_slots(trainable, others):
    """Map slot name -> trainable variable name.

    Keras 3 names a slot ``<optimizer>/<variable path with / as _>_<slot>``;
    the longest trainable key that starts the slot's last name part wins, and
    the shapes must agree.
    """
    keys = sorted(trainable, key=lambda v: -len(v.name))
    owner = {}
    for slot in others:
        last = slot.name.rpartition("/")[2]
        for var in keys:
            if last.startswith(_slot_key(var.name) + "_") and slot.shape == var.shape:
                owner[slot.name] = var.name
                break
    return owner


def _strip_gradient_scope(name):
    match = _BACKWARD_SCOPE.search(name)
    return name[match.end():] if match else name


def _match_slots_by_gradient(ops, consumers, trainable, slots, frontier):
    """Map slot name -> trainable variable name through the gradient the slot's update uses.

    For graphs without Keras names (a loaded GraphDef): a gradient tensor
    belongs to the trainable variable of the same shape whose reading op's
    scope contains the forward op the gradient was taken through.
    """
    scopes = []
    for var in trainable:
        for read in var.read_ops:
            for op, _ in consumers.get(read, []):
                scopes.append((op.scope + "/", var))
    owner = {}
    for slot in slots:
        candidates = set()
        for tensor in frontier[slot.name]:
            src = ops[_producer(tensor)]
            shape = src.output_shapes[int(tensor.rpartition(":")[2])]
            path = _strip_gradient_scope(src.name)
            candidates |= {v.name for scope, v in scopes if path.startswith(scope) and v.shape == shape}
        if len(candidates) == 1 and next(iter(candidates)) in {v.name for v in trainable if v.shape == slot.shape}:
            owner[slot.name] = candidates.pop()
    return owner


def analyse_variables(ops, handles):
    """Build VariableInfo records from the phased ops.

    Parameters
    ----------
    ops : dict
        Op name -> OpInfo, phases already assigned.
    handles : dict
        Handle op name -> dict with ``name``, ``shape``, ``dtype``, ``bytes``,
        ``trainable`` and optionally ``model_weight`` (default: trainable).

    Returns
    -------
    list of VariableInfo
        In the order of ``handles``.
    """
    consumers = _consumers(ops)
    variables = []
    frontier = {}
    for handle_op, facts in handles.items():
        handle_tensor = f"{handle_op}:0"
        users = consumers.get(handle_op, [])
        reads = [op.name for op, _ in users if op.type in READ_TYPES]
        updates = [op.name for op, i in users if i == 0 and is_update_type(op.type)]
        gathered = [
            op
            for read in reads
            for op, i in consumers.get(read, [])
            if i == 0 and op.type in GATHER_TYPES
        ] + [op for op, i in users if i == 0 and op.type == "ResourceGather"]
        var = VariableInfo(
            name=facts["name"],
            shape=list(facts["shape"]),
            dtype=facts["dtype"],
            bytes=int(facts["bytes"]),
            trainable=bool(facts["trainable"]),
            model_weight=bool(facts.get("model_weight", facts["trainable"])),
            handle_op=handle_op,
            read_ops=reads,
            update_ops=updates,
            sparse_gradient=bool(gathered) and bool(facts["trainable"]),
            sparse_update=any(ops[u].type.startswith(SPARSE_UPDATE_PREFIXES) for u in updates),
        )
        if var.sparse_gradient:
            var.rows_touched = _rows_touched(ops, gathered, var.shape)
        frontier[var.name] = _gradient_frontier(ops, updates, handle_tensor)
        variables.append(var)

    trainable = [v for v in variables if v.trainable]
    others = [v for v in variables if not v.trainable and v.update_ops]
    owner = _match_slots(trainable, others)
    unmatched = [v for v in others if v.name not in owner and frontier[v.name]]
    if unmatched:
        owner.update(_match_slots_by_gradient(ops, consumers, trainable, unmatched, frontier))
    by_name = {v.name: v for v in variables}
    for slot_name, var_name in owner.items():
        by_name[slot_name].slot_of = var_name
        by_name[var_name].slots.append(slot_name)
    for var in trainable:
        grads = set(frontier[var.name])
        for slot in var.slots:
            grads |= frontier[slot]
        var.gradients = sorted(grads)
    return variables


def _rows_touched(ops, gathers, shape):
    """Upper bound on the rows one step reads: the number of lookup indices."""
    total = 0
    for gather in gathers:
        indices = gather.data_inputs[1] if len(gather.data_inputs) > 1 else None
        src = ops.get(_producer(indices)) if indices else None
        if src is None:
            return None
        out_shape = src.output_shapes[int(indices.rpartition(":")[2])]
        if out_shape is None or any(d < 0 for d in out_shape):
            return None
        n = 1
        for d in out_shape:
            n *= d
        total += n
    return min(total, shape[0]) if shape else total
