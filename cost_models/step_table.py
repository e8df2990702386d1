"""A training step as a table: one row per op, in the order TensorFlow may run them.

The GPU kernel model (cost_models.gpu) and the liveness memory model
(cost_models.memory) read a step through this table rather than through the
GraphItem, so that the published-figure calibration configurations can ship
as tables (package data) and load without TensorFlow or their graphs.

Columns: the raw op features (cost_models.features.RAW_COLUMNS) plus
- ``phase``: forward, backward, update or other (autodist.graph.item);
- ``last_use``: index of the last op that reads an output of this op as data,
  directly or through ops that only alias it (:data:`ALIAS_TYPES`: a reshape
  or identity hands on the same buffer); -1 when none does.  Ops are in
  topological order;
- ``opaque_use``: the same, counting only readers that are neither
  elementwise (:data:`ELEMENTWISE`) nor reductions (:data:`REDUCTIONS`):
  -1 when only such ops read the output, so that a kernel fusing the chain
  (XLA fuses an elementwise producer into its consumer reduction, and so do
  the hand-fused normalisation kernels) never writes it out
  (:func:`inside_elementwise_chains`);
- ``fused``: 1 where a kernel fusing the step's elementwise chains (XLA, or
  a published PyTorch run's hand-fused kernels) runs the op inside the
  kernel of the product before it (see :func:`epilogue_fused`);
- ``remapped``: 1 where TensorFlow without XLA runs it inside another op's
  GPU kernel (Grappler's remapper, cost_models.gpu_remapper), and
  ``remapped_bytes`` what that kernel still moves for it;
- ``winograd``: 1 for a convolution cuDNN can run as a Winograd transform
  (cost_models.winograd);
- ``early_bytes``, ``early_use``: the bytes of the op's outputs that are
  last read before ``last_use``, and the last op that reads one of them
  (-1 and 0 bytes when none is): a multi-output op's outputs die apart
  (FusedBatchNormV3's normalised output is read once in the forward pass,
  its per-channel statistics by its gradient).

A table at one batch size scales to another: every op's FLOPs, bytes and
element counts are affine in the batch (:func:`at_batch`).
"""

from __future__ import annotations

import weakref

import numpy as np

from cost_models.features import RAW_COLUMNS, op_raw_features
from cost_models.gpu_remapper import StepGraph, remapper_fused
from cost_models.winograd import winograd_convs

TABLE_COLUMNS = RAW_COLUMNS + ("phase", "last_use", "opaque_use", "fused", "remapped", "remapped_bytes",
                                "winograd", "early_bytes", "early_use")
BATCH_AFFINE = ("flops", "input_bytes", "output_bytes", "in0_elements", "in1_elements", "out0_elements",
                "early_bytes", "remapped_bytes")

# XLA's GPU compiler runs a bias add and the activation after a convolution or matrix product in the product's
# kernel (cuDNN's fused convolution, cuBLASLt's epilogues), and the normalisation's Relu in its fusion; PyTorch's
# examples add a layer's bias inside its product.
FUSION_HEADS = ("Conv2D", "MatMul", "DepthwiseConv2dNative")
BATCH_NORMS = ("FusedBatchNorm", "FusedBatchNormV3")
FUSED_BIAS = ("BiasAdd",)
# Ops whose output is their input's buffer (no copy on a GPU).
ALIAS_TYPES = ("Identity", "IdentityN", "Reshape", "Squeeze", "ExpandDims", "Bitcast", "StopGradient",
               "PreventGradient", "EnsureShape", "CheckNumerics")
FUSED_ACTIVATIONS = ("Relu", "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid", "Gelu")
# Elementwise ops: one output element from the same element of each input (broadcasting aside), which
# XLA and the frameworks' hand-fused kernels (GELU, layer and batch norm, dropout) chain in one kernel.
ELEMENTWISE = ("Add", "AddV2", "AddN", "Sub", "Mul", "RealDiv", "Div", "DivNoNan", "Maximum", "Minimum", "Neg", "Abs",
               "Square", "Sqrt", "Rsqrt", "Exp", "Log", "Log1p", "Pow", "Reciprocal", "SquaredDifference", "Erf",
               "Erfc", "Tanh", "Sigmoid", "Relu", "Relu6", "Elu", "Selu", "Softplus", "LeakyRelu", "Gelu", "BiasAdd",
               "Cast", "Select", "SelectV2", "ReluGrad", "Relu6Grad", "EluGrad", "SeluGrad", "SoftplusGrad",
               "LeakyReluGrad", "TanhGrad", "SigmoidGrad", "RsqrtGrad", "SqrtGrad", "Sin", "Cos", "Tan", "BitwiseAnd",
               "BitwiseOr", "BitwiseXor", "Invert", "LeftShift", "RightShift")
REDUCTIONS = ("Sum", "Mean", "Max", "Min", "Prod")
FUSIBLE_READERS = ELEMENTWISE + REDUCTIONS + ALIAS_TYPES
CONV_TYPES = ("Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "Conv3D", "DepthwiseConv2dNative")


def epilogue_fused(ops, inputs=None):
    """Names of the ops a fusing GPU compiler runs in their producer's kernel (XLA; PyTorch's examples).

    ``ops`` are ``OpInfo`` records in topological order (``inputs``: their
    data inputs, when already at hand).  A ``BiasAdd``
    whose input is the only use of a convolution or matrix product is
    fused, and so is an activation whose input is the only use of such a
    fused ``BiasAdd``, and a ``Relu`` whose input is the only use of a
    fused batch norm's output.
    """
    by_name = {op.name: op for op in ops}
    inputs = inputs if inputs is not None else [op.data_inputs for op in ops]
    uses = {}
    for tensors in inputs:
        for tensor in tensors:
            uses[tensor] = uses.get(tensor, 0) + 1
    fused = set()
    for op, tensors in zip(ops, inputs):
        if not tensors:
            continue
        src = by_name.get(tensors[0].rpartition(":")[0])
        if src is None or uses[tensors[0]] != 1:
            continue
        if op.type in FUSED_BIAS and src.type in FUSION_HEADS:
            fused.add(op.name)
        elif op.type in FUSED_ACTIVATIONS and src.name in fused:
            fused.add(op.name)
        elif op.type == "Relu" and src.type in BATCH_NORMS:
            fused.add(op.name)
    return fused


# id of a GraphItem -> (a weak reference to it, its ops dict, their count, the table)
_TABLES = {}


def step_table(graph_item):
    """The :data:`TABLE_COLUMNS` of every op of ``graph_item`` (dict of arrays, graph order; read-only).

    Built once per GraphItem and ops dict (a rebatched step's placement
    problem and its op costs share it).
    """
    key = id(graph_item)
    cached = _TABLES.get(key)
    if (cached is not None and cached[0]() is graph_item and cached[1] is graph_item.ops
            and cached[2] == len(graph_item.ops)):
        return cached[3]
    table = _step_table(graph_item)
    alive = weakref.ref(graph_item, lambda _: _TABLES.pop(key, None))
    _TABLES[key] = (alive, graph_item.ops, len(graph_item.ops), table)
    return table


def _step_table(graph_item):
    ops = list(graph_item.ops.values())
    names, table = op_raw_features(graph_item)
    index = {name: i for i, name in enumerate(names)}
    inputs = [op.data_inputs for op in ops]
    producers = [[t.rpartition(":")[0] for t in tensors] for tensors in inputs]
    sources = [[index[p] for p in names if p in index] for names in producers]
    fused = epilogue_fused(ops, inputs)
    graph = StepGraph(ops, inputs)
    remapped = remapper_fused(graph, graph_item.job.gpu_env)
    table["phase"] = np.asarray([op.phase for op in ops], dtype=object)
    table["last_use"] = _last_readers(ops, sources, lambda op: True)
    table["opaque_use"] = _last_readers(ops, sources, lambda op: op.type not in FUSIBLE_READERS)
    table["fused"] = np.asarray([1.0 if op.name in fused else 0.0 for op in ops])
    table["remapped"] = np.asarray([1.0 if op.name in remapped else 0.0 for op in ops])
    table["remapped_bytes"] = np.asarray([float(remapped.get(op.name, 0)) for op in ops])
    winograd = winograd_convs(graph)
    table["winograd"] = np.asarray([1.0 if op.name in winograd else 0.0 for op in ops])
    table["early_bytes"], table["early_use"] = _early_outputs(ops, index, table["last_use"])
    return table


def _early_outputs(ops, index, last_use):
    """Per op, the bytes of its outputs last read before ``last_use`` (directly or through aliases) and the
    last op reading one of them."""
    last = {}  # (op index, output index) -> its last reader
    for i, op in enumerate(ops):
        for tensor in op.data_inputs:
            src, _, k = tensor.rpartition(":")
            if src in index:
                key = (index[src], int(k or 0))
                last[key] = max(last.get(key, -1), i)
    for i in range(len(ops) - 1, -1, -1):  # an alias keeps its input's buffer alive as long as itself
        if ops[i].type in ALIAS_TYPES and ops[i].data_inputs:
            src, _, k = ops[i].data_inputs[0].rpartition(":")
            if src in index:
                key = (index[src], int(k or 0))
                last[key] = max(last.get(key, -1), last_use[i])
    early_bytes, early_use = np.zeros(len(ops)), np.full(len(ops), -1, dtype=np.int64)
    for (i, k), reader in last.items():
        if reader < last_use[i] and k < len(ops[i].output_bytes):
            early_bytes[i] += ops[i].output_bytes[k]
            early_use[i] = max(early_use[i], reader)
    return early_bytes, early_use


def fuses_elementwise(xla, framework=""):
    """Whether the step runs its elementwise chains fused (cost_models.memory and cost_models.gpu use it).

    XLA fuses them; so do the hand-fused kernels of a published PyTorch run
    (``framework`` "pytorch": GELU, layer and batch norm, dropout).  A
    TensorFlow step without XLA runs the ops its graph holds: Keras 3's batch
    norm as primitive ops, TensorFlow 1's as one FusedBatchNormV3 op (the
    zoo's ``--fused-batch-norm``).
    """
    return bool(xla) or framework == "pytorch"


def inside_elementwise_chains(table):
    """Ops a kernel fusing elementwise chains runs inside the chain: elementwise, their output read only by
    elementwise ops and reductions.  Not bool masks, which dropout keeps for its backward, nor ops run in a
    product's kernel (``fused``): their output is the product kernel's, written out."""
    elementwise = np.isin(table["op_type"], ELEMENTWISE) & (table["dtype"] != "bool") & (table["fused"] == 0)
    return elementwise & (table["opaque_use"] < 0)


def _last_readers(ops, sources, counts):
    """Per op, the index of the last op that ``counts`` and reads its output, directly or through aliases."""
    last = np.full(len(ops), -1, dtype=np.int64)
    for i, srcs in enumerate(sources):
        if counts(ops[i]):
            for src in srcs:
                last[src] = max(last[src], i)
    for i in range(len(ops) - 1, -1, -1):  # an alias keeps its input's buffer alive as long as itself
        if ops[i].type in ALIAS_TYPES and sources[i]:
            last[sources[i][0]] = max(last[sources[i][0]], last[i])
    return last


def at_batch(table_a, batch_a, table_b, batch_b, batch):
    """The table at ``batch``, from the same step's tables at two other batch sizes.

    Raises ValueError when the two tables are not the same ops.
    """
    if not np.array_equal(table_a["op_type"], table_b["op_type"]) or batch_a == batch_b:
        raise ValueError("the two tables are not the same step at two batch sizes")
    out = dict(table_a)
    for column in BATCH_AFFINE:
        slope = (table_b[column] - table_a[column]) / (batch_b - batch_a)
        out[column] = np.maximum(table_a[column] + slope * (batch - batch_a), 0.0)
    return out


def save_tables(path, tables, scalars):
    """Write named tables and scalars to one compressed ``.npz`` (no pickles)."""
    arrays = {f"{name}/{column}": np.asarray(values, dtype=str if values.dtype == object else values.dtype)
              for name, table in tables.items() for column, values in table.items()}
    arrays.update({f"scalar/{k}": np.asarray(v) for k, v in scalars.items()})
    np.savez_compressed(path, **arrays)


def load_tables(path):
    """``(tables, scalars)`` written by :func:`save_tables`."""
    tables, scalars = {}, {}
    with np.load(path, allow_pickle=False) as data:
        for key in data.files:
            name, column = key.split("/", 1)
            values = data[key]
            if name == "scalar":
                scalars[column] = values.item()
            else:
                tables.setdefault(name, {})[column] = values.astype(object) if values.dtype.kind == "U" else values
    return tables, scalars
