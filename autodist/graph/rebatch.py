"""The same training step at another batch size, without tracing it again.

Data-parallel replicas each run the step on their slice of the global
batch, so the simulator needs the step at ``ceil(batch / replicas)`` samples
(the largest slice: the slowest replica).  A dimension carries the batch
when it is a multiple of the captured batch on a tensor that data flows to
from the step's inputs; scaling that dimension and recomputing the op's
FLOPs gives the step at the new batch.  Flow stops at the variables'
gradients, which have their variable's shape whatever the batch.

This is exact where every batch-carrying tensor has one dimension
proportional to the batch (dense, convolutional, embedding and transformer
steps: reshapes to ``batch * sequence`` included).  A constant-built
tensor whose batch dimension is not its first keeps its size.

A loop's body (autodist.graph.item.LoopInfo) reads the batch from the
loop's variables and tensor lists, whose shapes the step does not hold: a
body tensor whose first dimension is the captured batch carries it (the
batch-major time steps Keras' recurrent layers run), but for those computed
from variables and constants alone.  A weight with as many rows as the
batch inside a loop would be scaled too.  The trip count does not change.
"""

from __future__ import annotations

import math
from dataclasses import replace

from autodist.graph.flops import op_flops
from autodist.graph.item import GraphItem, VariableInfo, _plain

def replica_batch(batch, replicas, micro_batches=1):
    """Samples one replica runs per micro-batch: the largest slice of the global batch."""
    return max(math.ceil(batch / max(replicas, 1) / max(micro_batches, 1)), 1)


def _producer(tensor):
    return tensor.lstrip("^").rpartition(":")[0]


def _index(tensor):
    return int(tensor.rpartition(":")[2] or 0)


def _constant_ops(graph_item):
    """Ops computed from constants only (no step input, no variable): folded shapes, fills, tiles."""
    constant = set()
    for name, op in graph_item.ops.items():
        if op.type == "Const" or (op.data_inputs and all(_producer(t) in constant for t in op.data_inputs)):
            constant.add(name)
    return constant


def _carrying_dim(shape, batch, inputs):
    """The batch dimension of an op's output, from its carried ``inputs`` (``(shape, batch dimension)`` pairs).

    A dimension equal to an input's batch dimension carries it (products,
    convolutions, gathers); where the input has the output's rank, only at the
    same position (a reduction to 1 there drops the batch, whatever size the
    other dimensions have).  An output as large as a carried input
    (elementwise ops, reshapes, transposes) carries it in a multiple of the
    batch.  The first dimension wins where it qualifies (TensorFlow's tensors
    are batch-major).
    """
    if not shape or any(d <= 0 for d in shape):
        return None
    candidates = []
    for in_shape, in_dim in inputs:
        value = in_shape[in_dim]
        if len(in_shape) == len(shape):
            candidates += [in_dim] if shape[in_dim] == value else []
        else:
            candidates += [i for i, d in enumerate(shape) if d == value]
    if math.prod(shape) in {math.prod(in_shape) for in_shape, _ in inputs}:
        candidates += [i for i, d in enumerate(shape) if d % batch == 0]
    if not candidates:
        return None
    return 0 if 0 in candidates else candidates[0]


# Ops that build a tensor of the shape they are given: a broadcast (a reduction's gradient), a fill, random numbers
# (dropout's mask: its shape is the batch-carrying input's, computed from a Shape op whose value no shape shows).
_BROADCASTS = ("Tile", "BroadcastTo", "Fill", "RandomUniform", "RandomStandardNormal", "TruncatedNormal",
               "StatelessRandomUniformV2", "StatelessRandomNormalV2", "StatelessTruncatedNormalV2")


def _built_at_batch(op, shape, batch, constant):
    """A tensor expanded to the batch from something that does not carry it: a tile, broadcast, fill or random
    draw (:data:`_BROADCASTS`) or a folded constant of rank 2+, whose first dimension is the batch (a rank-1 constant
    of the batch's length is more likely a shape)."""
    if not shape or shape[0] != batch:
        return False
    if op.type in _BROADCASTS:
        return True
    return op.name in constant and (op.type != "Const" or len(shape) >= 2)


_VIEWS = ("Reshape", "Identity", "Cast", "ExpandDims", "Squeeze", "Snapshot")


def _dense_gradients(graph_item):
    """The dense gradients and the tensors they are views of (a bias gradient reshaped on its way to the update)."""
    frontier = [g for v in graph_item.variables.values() if not v.sparse_gradient for g in v.gradients]
    seen = set()
    while frontier:
        tensor = frontier.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        op = graph_item.ops.get(_producer(tensor))
        if op is not None and op.type in _VIEWS and op.data_inputs:
            frontier.append(op.data_inputs[0])
    return seen


def batch_tensors(graph_item):
    """``{tensor name: dimension}`` of every tensor that carries the captured batch.

    Flow starts at the step's inputs and at tensors expanded to the batch
    (:func:`_built_at_batch`), and
    stops at dense gradients and their views (a sparse gradient's rows carry
    the batch) and at reductions over the batch.
    """
    batch = graph_item.job.batch_size
    dense_gradients = _dense_gradients(graph_item)
    sources = graph_item.step_inputs()
    constant = _constant_ops(graph_item)
    shapes = {}
    carried = {}
    for name, op in graph_item.ops.items():
        inputs = [(shapes[t], carried[t]) for t in op.data_inputs if t in carried]
        for i, shape in enumerate(op.output_shapes):
            tensor = f"{name}:{i}"
            if tensor in dense_gradients:
                continue
            if name in sources or _built_at_batch(op, shape, batch, constant):
                dim = 0
            else:
                dim = _carrying_dim(shape, batch, inputs) if inputs else None
            if dim is not None:
                carried[tensor] = dim
                shapes[tensor] = shape
    return carried


def _scaled(shape, dim, batch, new_batch):
    out = list(shape)
    out[dim] = shape[dim] // batch * new_batch
    return out


def _rescaled_bytes(nbytes, old_shape, new_shape):
    """A tensor's bytes at its new shape (the element size is unchanged)."""
    old = math.prod(old_shape) if old_shape else 0
    return nbytes * math.prod(new_shape) // old if old > 0 else nbytes


def _rebatched_inputs(shapes, batch, new_batch):
    """Input shapes (a shape, or a dict or list of them, nested; None where a step recorded none) with a leading
    ``batch`` made ``new_batch``."""
    if shapes is None:
        return None
    if isinstance(shapes, dict):
        return {k: _rebatched_inputs(v, batch, new_batch) for k, v in shapes.items()}
    if shapes and all(isinstance(d, int) for d in shapes):
        return [new_batch, *shapes[1:]] if shapes[0] == batch else list(shapes)
    return [_rebatched_inputs(v, batch, new_batch) for v in shapes]


def _loop_at_batch(loop, batch, new_batch):
    """``loop`` (a LoopInfo) at ``new_batch``: its body's batch-major tensors scaled (see the module docstring)."""
    fixed = set()  # ops computed from variables and constants alone
    changed = set()
    shapes, ops = {}, []
    for op in loop.ops:
        if op.type in ("Const", "VarHandleOp", "ReadVariableOp") or (
                op.data_inputs and all(_producer(t) in fixed for t in op.data_inputs)):
            fixed.add(op.name)
        out_shapes = [_scaled(shape, 0, batch, new_batch) if op.name not in fixed and shape and shape[0] == batch
                      else shape for shape in op.output_shapes]
        shapes[op.name] = out_shapes
        if out_shapes != op.output_shapes or any(_producer(t) in changed for t in op.data_inputs):
            changed.add(op.name)
            in_shapes = [shapes.get(_producer(t), [None] * (_index(t) + 1))[_index(t)] for t in op.data_inputs]
            op = replace(op, output_shapes=out_shapes,
                         output_bytes=[_rescaled_bytes(b, old, new) for b, old, new
                                       in zip(op.output_bytes, op.output_shapes, out_shapes)],
                         flops=op_flops(op.type, in_shapes, out_shapes, op.attrs))
        ops.append(op)
    loops = [_loop_at_batch(inner, batch, new_batch) for inner in loop.loops]
    _set_loop_flops(ops, loops)
    return replace(loop, ops=ops, loops=loops)


def _set_loop_flops(ops, loops):
    """Give the loop ops among ``ops`` their (rescaled) loops' FLOPs and kept bytes (copies of the records)."""
    index = {op.name: i for i, op in enumerate(ops)}
    for loop in loops:
        i = index[loop.op]
        kept = loop.kept_bytes()
        ops[i] = replace(ops[i], flops=loop.flops(),
                         output_bytes=[kept.get(k, b) for k, b in enumerate(ops[i].output_bytes)])


def at_batch(graph_item, new_batch):
    """``graph_item`` as if captured at ``new_batch`` samples (itself when the batch is unchanged).

    Raises ValueError when the captured batch is unknown (0): nothing says
    which dimensions carry it.
    """
    batch = graph_item.job.batch_size
    if not batch or batch <= 0:
        raise ValueError("the step's batch size is unknown, so it cannot be priced at another batch")
    if new_batch == batch:
        return graph_item
    carried = batch_tensors(graph_item)
    shapes = {}
    ops = []
    for name, op in graph_item.ops.items():
        out_shapes = []
        for i, shape in enumerate(op.output_shapes):
            dim = carried.get(f"{name}:{i}")
            out_shapes.append(_scaled(shape, dim, batch, new_batch) if dim is not None else shape)
        shapes[name] = out_shapes
        if out_shapes != op.output_shapes or any(t in carried for t in op.data_inputs):
            in_shapes = [shapes.get(_producer(t), [None] * (_index(t) + 1))[_index(t)] for t in op.data_inputs]
            op = replace(op, output_shapes=out_shapes,
                         output_bytes=[_rescaled_bytes(b, old, new) for b, old, new
                                       in zip(op.output_bytes, op.output_shapes, out_shapes)],
                         flops=op_flops(op.type, in_shapes, out_shapes, op.attrs))
        ops.append(op)  # the records' other fields are shared with graph_item's (captured records do not change)
    loops = [_loop_at_batch(loop, batch, new_batch) for loop in graph_item.loops.values()]
    _set_loop_flops(ops, loops)
    variables = []
    for var in graph_item.variables.values():
        record = _plain(var)
        if var.rows_touched is not None:
            rows = var.shape[0] if var.shape else var.rows_touched
            record["rows_touched"] = min(math.ceil(var.rows_touched * new_batch / batch), rows)
        variables.append(VariableInfo(**record))
    job = _plain(graph_item.job)
    job["batch_size"] = new_batch
    job["input_shapes"] = _rebatched_inputs(graph_item.job.input_shapes, batch, new_batch)
    return GraphItem(ops, variables, type(graph_item.job)(**job), loops)
