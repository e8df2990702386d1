"""The invariants of a GraphItem document, checked before anything trusts it.

:func:`check_graph_document` runs when a graph.json is read
(:meth:`autodist.graph.item.GraphItem.from_dict`).  It checks, in order: the
type of every field; then unique names, inputs that name an existing op
output, an acyclic graph, non-negative shapes, bytes and FLOPs (at most
:data:`MAX_OP_FLOPS` per op), a positive batch, at least one trainable
variable, and variables whose ops, gradients and slots exist.  A trainable
variable that is updated has a gradient; one with neither is the capture
saying it saw no update (a forward-only graph such as a serving signature,
or an update inside a conditional, as LossScaleOptimizer applies them).

Every failure is an :class:`~autodist.errors.InputError` naming the file and
the field, e.g. ``graph.json: ops[12].output_bytes[0]: must be >= 0, got -4``.
"""

from __future__ import annotations

import networkx as nx

from autodist.errors import InputError
from autodist.graph.job_options import GPU_ENV

# The phases of a training step an op may belong to (a GraphItem's ``OpInfo.phase``).
PHASES = ("forward", "backward", "update", "other")

# One op of 10^18 FLOPs takes over 15 minutes on an H100 at its 989 TFLOP/s
# tensor peak: no training step of a real model holds such an op.
MAX_OP_FLOPS = 10**18


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str(value):
    return isinstance(value, str)


def _is_shape(value):
    return value is None or (isinstance(value, list) and all(_is_int(d) for d in value))


def _is_input_shapes(value):
    """A shape (a list of integers), or an object or list of them, nested as the step's inputs are."""
    if isinstance(value, dict):
        return all(_is_input_shapes(v) for v in value.values())
    if isinstance(value, list):
        return all(_is_int(d) for d in value) or all(isinstance(v, (list, dict)) and _is_input_shapes(v)
                                                      for v in value)
    return False


def _list_of(test):
    return lambda value: isinstance(value, list) and all(test(v) for v in value)


_STRINGS = (_list_of(_is_str), "a list of strings")
_INTS = (_list_of(_is_int), "a list of integers")
_STRING = (_is_str, "a string")
_INT = (_is_int, "an integer")
_BOOL = (lambda v: isinstance(v, bool), "true or false")
_DICT = (lambda v: isinstance(v, dict), "an object")

# Field -> (test, what it must be), per record.
OP_FIELDS = {
    "name": _STRING,
    "type": _STRING,
    "inputs": _STRINGS,
    "output_shapes": (_list_of(_is_shape), "a list of shapes (lists of integers, or null)"),
    "output_dtypes": _STRINGS,
    "output_bytes": _INTS,
    "scope": _STRING,
    "phase": _STRING,
    "flops": _INT,
    "colocation": _STRINGS,
    "device": _STRING,
    "attrs": _DICT,
}
VARIABLE_FIELDS = {
    "name": _STRING,
    "shape": _INTS,
    "dtype": _STRING,
    "bytes": _INT,
    "trainable": _BOOL,
    "handle_op": _STRING,
    "read_ops": _STRINGS,
    "gradients": _STRINGS,
    "sparse_gradient": _BOOL,
    "sparse_update": _BOOL,
    "update_ops": _STRINGS,
    "slots": _STRINGS,
    "slot_of": (lambda v: v is None or _is_str(v), "a string or null"),
    "rows_touched": (lambda v: v is None or _is_int(v), "an integer or null"),
    "model_weight": _BOOL,
}
LOOP_FIELDS = {
    "op": _STRING,
    "trips": (lambda v: _is_int(v) and v >= 0, "a trip count (an integer >= 0)"),
    "trips_known": _BOOL,
    "lowered": _BOOL,
    "ops": (lambda v: isinstance(v, list), "a list of ops"),
    "outputs": _STRINGS,
    "loops": (lambda v: isinstance(v, list), "a list of loops"),
}
JOB_FIELDS = {
    "model_name": _STRING,
    "batch_size": _INT,
    "input_shapes": (lambda v: isinstance(v, dict) and _is_input_shapes(v),
                     "an object of shapes (lists of integers), or of objects and lists of them"),
    "optimizer": _STRING,
    "tf_version": _STRING,
    "source": _STRING,
    "step": _STRING,
    "precision": (lambda v: v in ("", "fp32", "tf32", "fp16", "bf16"), 'one of "", "fp32", "tf32", "fp16", "bf16"'),
    "dtype_policy": _STRING,
    "xla": _BOOL,
    "jit_compile": (lambda v: v in ("", "auto", "on", "off"), 'one of "", "auto", "on", "off"'),
    "jit_supported": _BOOL,
    "distribute_strategy": _STRING,
    "cudnn_rnns": (lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v), "a list of layer names"),
    "framework": (lambda v: v in ("", "pytorch"), 'one of "", "pytorch"'),
    "layout": (lambda v: v in ("", "nhwc", "nchw"), 'one of "", "nhwc", "nchw"'),
    "amp_rewrite": _BOOL,
    "gpu_env": (lambda v: isinstance(v, list) and all(name in GPU_ENV for name in v),
                f"a list of TensorFlow switches ({', '.join(GPU_ENV)})"),
    "micro_batches": (lambda v: _is_int(v) and v >= 1, "a positive integer"),
    "collective_only": _BOOL,
    "batch_pinned": _STRING,
    "batch_per_replica": _BOOL,
    "script_batch": (lambda v: _is_int(v) and v >= 0, "a batch size (0: the job's)"),
    "fit_arguments": (lambda v: isinstance(v, list) and all(_is_str(a) for a in v), "a list of argument names"),
    "custom_train_step": _STRING,
    "updates_per_step": (lambda v: isinstance(v, dict) and all(_is_str(n) and _is_int(k) and k > 1 for n, k in v.items()),
                         "an object of variable names and update counts above 1"),
    "input_pipeline": (lambda v: isinstance(v, list) and all(_is_str(a) for a in v), "a list of op types"),
}


class _Checker:
    """Raises the first problem of one document as an InputError naming ``where`` and the field."""

    def __init__(self, where):
        self.where = where

    def fail(self, field, message):
        raise InputError(message, source=self.where, field=field)

    def types(self, record, spec, prefix):
        if not isinstance(record, dict):
            self.fail(prefix, f"must be an object, got {type(record).__name__}")
        unknown = sorted(set(record) - set(spec))
        if unknown:
            self.fail(prefix, f"unknown field {unknown[0]!r}")
        for name, value in record.items():
            test, what = spec[name]
            if not test(value):
                self.fail(f"{prefix}.{name}", f"must be {what}, got {value!r:.60}")

    def at_least(self, value, low, field):
        if value < low:
            self.fail(field, f"must be >= {low}, got {value}")


def check_graph_document(data, where="<graph item>"):
    """Raise InputError naming the first field of a GraphItem document (a dict) that breaks an invariant.

    Parameters
    ----------
    data : dict
        The document, already known to be of the graph item format and version.
    where : str
        The file it came from, for messages.
    """
    check = _Checker(where)
    for key, kind in (("ops", list), ("variables", list), ("job", dict)):
        if key not in data:
            check.fail(key, "missing field")
        if not isinstance(data[key], kind):
            check.fail(key, f"must be {'a list' if kind is list else 'an object'}, got {type(data[key]).__name__}")
    for i, op in enumerate(data["ops"]):
        check.types(op, OP_FIELDS, f"ops[{i}]")
    for i, var in enumerate(data["variables"]):
        check.types(var, VARIABLE_FIELDS, f"variables[{i}]")
    check.types(data["job"], JOB_FIELDS, "job")
    outputs = _check_ops(check, data["ops"])
    _check_loops(check, data.get("loops", []), data["ops"], "loops")
    _check_variables(check, data["variables"], outputs)
    if data["job"].get("batch_size", 0) < 1:
        check.fail("job.batch_size", f"must be a positive batch size, got {data['job'].get('batch_size', 0)} "
                   "(a loaded graph takes it from its inputs' first dimension, which must be known)")


LOOP_TYPES = ("While", "StatelessWhile")


def _check_loops(check, loops, ops, prefix):
    """Check the loop bodies of ``ops`` (a document's ``loops`` field, or a body's), each naming a loop op of
    ``ops`` and holding ops that read only each other (an iteration's ops, see autodist.graph.item.LoopInfo)."""
    if not isinstance(loops, list):
        check.fail(prefix, f"must be a list, got {type(loops).__name__}")
    types = {op.get("name"): op.get("type") for op in ops}
    for i, loop in enumerate(loops):
        at = f"{prefix}[{i}]"
        check.types(loop, LOOP_FIELDS, at)
        if types.get(loop.get("op")) not in LOOP_TYPES:
            check.fail(f"{at}.op", f"{loop.get('op')!r} names no loop op ({', '.join(LOOP_TYPES)}) of the graph")
        for j, op in enumerate(loop.get("ops", [])):
            check.types(op, OP_FIELDS, f"{at}.ops[{j}]")
        _check_ops(check, loop.get("ops", []), f"{at}.ops")
        _check_loops(check, loop.get("loops", []), loop.get("ops", []), f"{at}.loops")


def _check_ops(check, ops, prefix="ops"):
    """Check ops alone (a document's, or one loop body's: ``prefix``); returns op name -> number of outputs."""
    if not ops:
        check.fail(prefix, "the graph has no ops")
    outputs = {}
    for i, op in enumerate(ops):
        name = op.get("name")
        if name is None or "type" not in op:
            check.fail(f"{prefix}[{i}]", f"missing field {'name' if name is None else 'type'!r}")
        if name in outputs:
            check.fail(f"{prefix}[{i}].name", f"duplicate op name {name!r}")
        lengths = {len(op.get(k, [])) for k in ("output_shapes", "output_dtypes", "output_bytes")}
        if len(lengths) > 1:
            check.fail(f"{prefix}[{i}]",
                       f"op {name!r}: output_shapes, output_dtypes and output_bytes differ in length")
        outputs[name] = max(lengths)
        if op.get("phase", "other") not in PHASES:
            check.fail(f"{prefix}[{i}].phase", f"unknown phase {op['phase']!r} (one of {', '.join(PHASES)})")
        for j, shape in enumerate(op.get("output_shapes", [])):
            for d in shape or ():
                check.at_least(d, -1, f"{prefix}[{i}].output_shapes[{j}]")
        for j, nbytes in enumerate(op.get("output_bytes", [])):
            check.at_least(nbytes, 0, f"{prefix}[{i}].output_bytes[{j}]")
        flops = op.get("flops", 0)
        check.at_least(flops, 0, f"{prefix}[{i}].flops")
        if flops > MAX_OP_FLOPS:
            check.fail(f"{prefix}[{i}].flops",
                       f"op {name!r} claims {flops:.3g} FLOPs, above the limit of {MAX_OP_FLOPS:.0e}")
    graph = nx.DiGraph()
    graph.add_nodes_from(outputs)
    for i, op in enumerate(ops):
        for j, tensor in enumerate(op.get("inputs", [])):
            src = _resolve(check, tensor, outputs, f"{prefix}[{i}].inputs[{j}]")
            graph.add_edge(src, op["name"])
    if nx.is_directed_acyclic_graph(graph):
        return outputs
    # find_cycle alone is quadratic on large graphs; look only inside a strongly connected component.
    loop = next(c for c in nx.strongly_connected_components(graph) if len(c) > 1 or graph.has_edge(*[min(c)] * 2))
    cycle = nx.find_cycle(graph.subgraph(loop))
    check.fail(prefix, f"the graph has a cycle: {' -> '.join(edge[0] for edge in cycle)} -> {cycle[0][0]}")


def _resolve(check, tensor, outputs, field):
    """The op of ``"op:index"`` or ``"^op"``, which must exist (and have that output)."""
    if tensor.startswith("^"):
        src, index = tensor[1:], None
    else:
        src, _, index = tensor.rpartition(":")
        if not src or not index.isdigit():
            check.fail(field, f"tensor name {tensor!r} is not 'op:index' or '^op'")
    if src not in outputs:
        check.fail(field, f"{tensor!r} names no op of the graph")
    if index is not None and int(index) >= outputs[src]:
        check.fail(field, f"{tensor!r}: op {src!r} has {outputs[src]} outputs")
    return src


def _check_variables(check, variables, outputs):
    names = set()
    for i, var in enumerate(variables):
        for key in ("name", "shape", "dtype", "bytes"):
            if key not in var:
                check.fail(f"variables[{i}]", f"missing field {key!r}")
        if var["name"] in names:
            check.fail(f"variables[{i}].name", f"duplicate variable name {var['name']!r}")
        names.add(var["name"])
    trainable = {v["name"] for v in variables if v.get("trainable", True)}
    if not trainable:
        check.fail("variables", "the graph has no trainable variables")
    for i, var in enumerate(variables):
        at = f"variables[{i}]"
        for d in var["shape"]:
            check.at_least(d, 0, f"{at}.shape")
        check.at_least(var["bytes"], 0, f"{at}.bytes")
        if var.get("rows_touched") is not None:
            check.at_least(var["rows_touched"], 0, f"{at}.rows_touched")
        ops_named = [("handle_op", var.get("handle_op") or None)]
        ops_named += [(f"{key}[{j}]", op) for key in ("read_ops", "update_ops") for j, op in enumerate(var.get(key, []))]
        for key, op in ops_named:
            if op is not None and op not in outputs:
                check.fail(f"{at}.{key}", f"variable {var['name']!r}: {op!r} names no op of the graph")
        for j, tensor in enumerate(var.get("gradients", [])):
            _resolve(check, tensor, outputs, f"{at}.gradients[{j}]")
        for j, slot in enumerate(var.get("slots", [])):
            if slot not in names:
                check.fail(f"{at}.slots[{j}]", f"variable {var['name']!r}: slot {slot!r} names no variable")
        if var.get("slot_of") is not None and var["slot_of"] not in trainable:
            check.fail(f"{at}.slot_of", f"{var['slot_of']!r} names no trainable variable")
        if var["name"] in trainable and var.get("update_ops") and not var.get("gradients"):
            check.fail(f"{at}.gradients", f"trainable variable {var['name']!r} is updated but has no gradient")
