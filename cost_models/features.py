"""Op-cost features per (op, device).

Raw features describe an op (type, dtype, FLOPs, bytes, main sizes, and
whether any op reads its outputs); derived ones its FLOPs per output
element (a matmul's inner dimension, a convolution's window times its
input channels) and per byte moved (arithmetic intensity);
device features add the device's peak FLOP/s and memory bandwidth and the
roofline estimate ``max(FLOPs / peak, bytes / bandwidth)`` (a gather's bytes
are the rows it gathers).  The same raw
columns are stored with every measured timing (see cost_models.fitting.dataset), so
rows measured on any device, CPU or GPU, turn into the same design matrix.
"""

from __future__ import annotations

import numpy as np

# Columns that describe one op, whatever the device.
RAW_COLUMNS = (
    "op_type",
    "dtype",
    "flops",
    "input_bytes",
    "output_bytes",
    "in0_elements",
    "in1_elements",
    "out0_elements",
    "out_rank",
    "n_inputs",
    "out_last_dim",
    "transposed_operands",
    "unread",
)
NUMERIC_RAW = RAW_COLUMNS[2:]

# Columns of the design matrix fed to the regressor; column 0 is categorical.
FEATURES = (
    "op_type",
    "dtype_bytes",
    "log_flops",
    "log_input_bytes",
    "log_output_bytes",
    "log_in0_elements",
    "log_in1_elements",
    "log_out0_elements",
    "out_rank",
    "n_inputs",
    "log_out_last_dim",
    "log_peak_flops",
    "log_memory_bandwidth",
    "log_roofline_seconds",
    "log_flops_per_output",
    "log_flops_per_byte",
    "transposed_operands",
)

DTYPE_BYTES = {
    "float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "half": 2, "float": 4, "double": 8,
    "int8": 1, "uint8": 1, "int16": 2, "int32": 4, "int64": 8, "bool": 1, "complex64": 8,
    "complex128": 16, "string": 8, "resource": 8, "variant": 8,
}


# TensorFlow switches a resource variable to copy-on-read once a sparse op
# gathers from or scatters into it (EnsureSparseVariableAccess in
# tensorflow/core/kernels/resource_variable_ops.cc): from then on every dense
# read copies the whole variable.  Such reads get their own op type.
COPY_ON_READ = "ReadVariableOp(copy)"
SPARSE_ACCESS_PREFIXES = ("ResourceGather", "ResourceScatter", "ResourceSparseApply")


def _sparse_handles(ops):
    """Input tensors of the ops that touch a variable sparsely (its handles among them)."""
    return {t for op in ops if op.type.startswith(SPARSE_ACCESS_PREFIXES) for t in op.data_inputs}


def op_type_of(op, sparse_handles):
    """The op type the cost model sees: a dense read of a copy-on-read variable is its own type."""
    if op.type == "ReadVariableOp" and op.data_inputs and op.data_inputs[0] in sparse_handles:
        return COPY_ON_READ
    return op.type


# Ops of a loop's iteration that hand its values to the next one (autodist.graph.loops): read, though no op of
# the iteration reads them.
LOOP_BACK = ("NextIteration", "_Retval")


def unread_ops(ops):
    """Names of the ops with outputs that no op reads as data.

    Nothing fetched depends on them (control edges from automatic control
    dependencies aside), so Grappler prunes them and they never run: in the
    profiled zoo steps, none of these ops ran a kernel (e.g. the
    ``Shape/ReadVariableOp`` of a Keras embedding, the input gradient of a
    network's first convolution).  A loop iteration's :data:`LOOP_BACK` ops
    are read by the next iteration.
    """
    read = {tensor.rpartition(":")[0] for op in ops for tensor in op.data_inputs}
    return {op.name for op in ops if op.output_shapes and op.name not in read and op.type not in LOOP_BACK}


def _elements(shape):
    """Elements of a static shape; 0 when unknown."""
    if shape is None:
        return 0
    n = 1
    for d in shape:
        if d is None or d < 0:
            return 0
        n *= d
    return n


def transposed_operands(attrs):
    """Which operands a matmul reads transposed: 1 the first, 2 the second, 3 both, 0 neither or not a matmul.

    A transposed operand is read across its rows; for a skinny matrix that
    ran up to 3x slower here than the same product untransposed.
    """
    return (1 if attrs.get("transpose_a") or attrs.get("adj_x") else 0) + (
        2 if attrs.get("transpose_b") or attrs.get("adj_y") else 0)


def op_raw_features(graph_item):
    """Raw feature columns of every op of ``graph_item``.

    Returns
    -------
    names : list of str
        Op names in graph order.
    raw : dict of column name -> numpy array
        ``op_type`` and ``dtype`` are string arrays, the rest float64.
    """
    ops = list(graph_item.ops.values())
    shapes = {op.name: op.output_shapes for op in ops}
    sparse_handles = _sparse_handles(ops)
    pruned = unread_ops(ops)
    rows = {c: [] for c in RAW_COLUMNS}
    for op in ops:
        inputs = op.data_inputs
        in_shapes = []
        input_bytes = 0
        for tensor in inputs:
            input_bytes += graph_item.tensor_bytes(tensor)
            src, _, idx = tensor.rpartition(":")
            out = shapes.get(src) or []
            i = int(idx) if idx.isdigit() else 0
            in_shapes.append(out[i] if i < len(out) else None)
        out0 = op.output_shapes[0] if op.output_shapes else None
        rows["op_type"].append(op_type_of(op, sparse_handles))
        rows["dtype"].append(op.output_dtypes[0] if op.output_dtypes else "")
        rows["flops"].append(op.flops)
        rows["input_bytes"].append(input_bytes)
        rows["output_bytes"].append(op.total_output_bytes)
        rows["in0_elements"].append(_elements(in_shapes[0]) if in_shapes else 0)
        rows["in1_elements"].append(_elements(in_shapes[1]) if len(in_shapes) > 1 else 0)
        rows["out0_elements"].append(_elements(out0))
        rows["out_rank"].append(len(out0) if out0 is not None else -1)
        rows["n_inputs"].append(len(inputs))
        rows["out_last_dim"].append(out0[-1] if out0 else 0)
        rows["transposed_operands"].append(transposed_operands(op.attrs))
        rows["unread"].append(1.0 if op.name in pruned else 0.0)
    return [op.name for op in ops], to_arrays(rows)


def to_arrays(rows):
    """Column lists to arrays: strings for op_type/dtype, float64 otherwise."""
    out = {}
    for column in RAW_COLUMNS:
        values = rows[column]
        if column in ("op_type", "dtype"):
            out[column] = np.asarray(values, dtype=object)
        else:
            out[column] = np.asarray(values, dtype=np.float64)
    return out


def device_peak(device, dtype="float32"):
    """Peak FLOP/s of ``device`` for ``dtype``; ValueError when the device does not list it."""
    peaks = device.peak_flops or {}
    if dtype not in peaks:
        raise ValueError(f"device {device.name!r} lists no {dtype} peak_flops")
    return float(peaks[dtype])


# Ops that read only the rows they gather from the table that is their first input.
GATHER_TYPES = ("GatherV2", "Gather", "ResourceGather", "GatherNd", "ResourceGatherNd")


def moved_bytes(raw):
    """Bytes an op reads and writes, per row: its inputs and outputs, except
    that a gather reads the rows it gathers (its output's size), not the
    whole table it indexes."""
    everything = raw["input_bytes"] + raw["output_bytes"]
    table = raw["in0_elements"] * np.array([DTYPE_BYTES.get(str(d), 4) for d in raw["dtype"]], dtype=np.float64)
    gathered = 2 * raw["output_bytes"] + np.maximum(raw["input_bytes"] - table, 0.0)
    return np.where(np.isin(raw["op_type"], GATHER_TYPES), gathered, everything)


def _log(x):
    return np.log10(np.maximum(np.asarray(x, dtype=np.float64), 0.0) + 1.0)


def design_matrix(raw, peak_flops, memory_bandwidth):
    """The regressor's input (object array, columns as in ``FEATURES``).

    ``peak_flops`` and ``memory_bandwidth`` are scalars or per-row arrays.
    """
    n = len(raw["op_type"])
    peak = np.broadcast_to(np.asarray(peak_flops, dtype=np.float64), (n,))
    bandwidth = np.broadcast_to(np.asarray(memory_bandwidth, dtype=np.float64), (n,))
    dtype_bytes = np.array([DTYPE_BYTES.get(str(d), 4) for d in raw["dtype"]], dtype=np.float64)
    moved = moved_bytes(raw)
    columns = [
        raw["op_type"],
        dtype_bytes,
        _log(raw["flops"]),
        _log(raw["input_bytes"]),
        _log(raw["output_bytes"]),
        _log(raw["in0_elements"]),
        _log(raw["in1_elements"]),
        _log(raw["out0_elements"]),
        raw["out_rank"],
        raw["n_inputs"],
        _log(raw["out_last_dim"]),
        np.log10(peak),
        np.log10(bandwidth),
        np.log10(np.maximum(raw["flops"] / peak, moved / bandwidth) + 1e-9),  # the roofline estimate
        _log(raw["flops"] / np.maximum(raw["out0_elements"], 1.0)),
        _log(raw["flops"] / np.maximum(moved, 1.0)),
        raw["transposed_operands"],
    ]
    X = np.empty((n, len(FEATURES)), dtype=object)
    for j, column in enumerate(columns):
        X[:, j] = column
    return X

