"""Conversion of a TensorFlow graph into OpInfo records (needs TensorFlow)."""

from __future__ import annotations

from autodist.graph.flops import op_flops
from autodist.graph.item import OpInfo
from autodist.graph.naming import variable_name

# Ops that call a function of the graph's library (a nested tf.function, a SavedModel body).
CALL_TYPES = ("PartitionedCall", "StatefulPartitionedCall")

# Attributes that cost features need; everything else stays in TensorFlow.
KEPT_ATTRS = (
    "strides",
    "padding",
    "data_format",
    "dilations",
    "ksize",
    "transpose_a",
    "transpose_b",
    "adj_x",
    "adj_y",
    "equation",
    "is_training",
)


def shape_list(tensor_shape):
    """A TensorShape as a list of ints (-1 unknown), or None for unknown rank."""
    if tensor_shape.rank is None:
        return None
    return [-1 if d is None else int(d) for d in tensor_shape.as_list()]


def tensor_bytes(shape, dtype):
    """Bytes of a tensor of ``shape`` (as :func:`shape_list` gives it) and ``dtype``; 0 when unknown."""
    if shape is None or any(d < 0 for d in shape):
        return 0
    try:
        size = dtype.size
    except (TypeError, ValueError):  # resource, variant, string: no fixed size
        return 0
    n = 1
    for d in shape:
        n *= d
    return n * size


def _attr_value(value):
    kind = value.WhichOneof("value")
    if kind == "list":
        if value.list.i:
            return [int(i) for i in value.list.i]
        if value.list.s:
            return [s.decode() for s in value.list.s]
        return []
    if kind == "s":
        return value.s.decode()
    if kind in ("i", "b", "f"):
        return getattr(value, kind)
    return None


def _colocation(node_def):
    if "_class" not in node_def.attr:
        return []
    return [s.decode()[len("loc:@"):] for s in node_def.attr["_class"].list.s if s.startswith(b"loc:@")]


def op_infos(graph):
    """OpInfo of every op of a ``tf.Graph``, in the graph's (topological) order.

    Phases are left at ``"other"``; :mod:`autodist.graph.analysis` sets them.
    """
    infos = []
    for op in graph.get_operations():
        node_def = op.node_def
        out_shapes = [shape_list(t.shape) for t in op.outputs]
        attrs = {}
        for key in KEPT_ATTRS:
            if key in node_def.attr:
                value = _attr_value(node_def.attr[key])
                if value is not None:
                    attrs[key] = value
        # control inputs come from sets inside TensorFlow: sort them for a reproducible item
        inputs = [t.name for t in op.inputs] + sorted(f"^{c.name}" for c in op.control_inputs)
        in_shapes = [shape_list(t.shape) for t in op.inputs]
        infos.append(
            OpInfo(
                name=op.name,
                type=op.type,
                inputs=inputs,
                output_shapes=out_shapes,
                output_dtypes=[t.dtype.name for t in op.outputs],
                output_bytes=[tensor_bytes(s, t.dtype) for s, t in zip(out_shapes, op.outputs)],
                scope=op.name.rpartition("/")[0],
                flops=op_flops(op.type, in_shapes, out_shapes, attrs),
                colocation=_colocation(node_def),
                device=op.device,
                attrs=attrs,
            )
        )
    return infos


# Stateful ops that TensorFlow still drops from a function's body when nothing reads them, and the control-flow
# primitives it always keeps (PruneFunctionBody in tensorflow/core/common_runtime/function_def_utils.cc, and
# Node::IsControlFlow in tensorflow/core/graph/graph.h).
PRUNABLE_STATEFUL = ("ResourceGather", "ResourceGatherNd")
CONTROL_FLOW = ("Switch", "RefSwitch", "Merge", "RefMerge", "Enter", "RefEnter", "Exit", "RefExit", "NextIteration",
                "RefNextIteration", "LoopCond")


def live_ops(graph, roots):
    """Names of the ops of ``graph`` (a ``tf.Graph``) that a step runs: those that the ops named in ``roots`` (the
    function's outputs and control outputs), its stateful ops and its control-flow primitives need, over data and
    control inputs.

    TensorFlow prunes the others from a function's body before it runs
    (PruneFunctionBody): a gradient that the tape builds but the step never
    reads, e.g. that of a frozen layer's kernel, whose tensors the tape
    watched, or of an input image, costs nothing.
    """
    def kept(op):
        try:
            stateful = op.op_def.is_stateful
        except (AttributeError, KeyError, ValueError):  # no definition to read: keep it
            stateful = True
        return (stateful and op.type not in PRUNABLE_STATEFUL) or op.type in CONTROL_FLOW

    names = set(roots)
    stack = [op for op in graph.get_operations() if op.name in names or kept(op)]
    live = set()
    while stack:
        op = stack.pop()
        if op.name in live:
            continue
        live.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return live


def variable_facts(var, name=None):
    """Name (``name``, else :func:`~autodist.graph.naming.variable_name`), shape, dtype, bytes and trainable flag
    of a live ``tf.Variable``."""
    shape = var.shape.as_list()
    n = 1
    for d in shape:
        n *= d
    return {
        "name": name or variable_name(var),
        "shape": shape,
        "dtype": var.dtype.name,
        "bytes": n * var.dtype.size,
        "trainable": bool(var.trainable),
    }


# Grappler's inliner leaves a call marked for XLA compilation (this attribute on the call node; tf.function's
# jit_compile sets it) where it is (InlineFunctionCalls in tensorflow/core/grappler/optimizers/function_optimizer.cc;
# its aggressive mode ignores _noinline).
XLA_MUST_COMPILE = "_XlaMustCompile"


def _inlinable(concrete):
    """``concrete``'s graph, inputs and outputs with no call marked for XLA compilation.

    Keras 3 runs a grouped convolution (a kernel of fewer input channels
    than its input) inside a ``tf.function(jit_compile=True)``, which its
    TensorFlow backend needs on CPUs; XLA on a GPU runs that convolution as
    one cuDNN convolution, so the step is priced on the convolution ops the
    function holds, as if TensorFlow ran them.
    """
    from types import SimpleNamespace

    import tensorflow as tf

    graph_def = concrete.graph.as_graph_def()
    nodes = list(graph_def.node) + [node for function in graph_def.library.function for node in function.node_def]
    for node in nodes:
        if XLA_MUST_COMPILE in node.attr:
            del node.attr[XLA_MUST_COMPILE]
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    return SimpleNamespace(graph=graph, inputs=[graph.get_tensor_by_name(t.name) for t in concrete.inputs],
                           outputs=[graph.get_tensor_by_name(t.name) for t in concrete.outputs])


def has_calls(graph):
    """Whether ``graph`` calls library functions whose ops would stay hidden."""
    return any(op.type in CALL_TYPES for op in graph.get_operations())


def inlined_graph(concrete, variables):
    """The graph of ``concrete`` with every function call inlined (Grappler's inliner).

    Calls to functions compiled with XLA are inlined too (see
    :func:`_inlinable`).  ``variables`` maps the names of the resource
    placeholders of known variables to their facts (see
    :func:`variable_facts`); those placeholders become ``VarHandleOp``s with
    the real shape and dtype, so that shape inference reaches every op that
    reads them.
    """
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import _run_inline_graph_optimization

    graph_def = _run_inline_graph_optimization(_inlinable(concrete), lower_control_flow=False,
                                               aggressive_inlining=True)
    for node in graph_def.node:
        facts = variables.get(node.name)
        if facts is None or node.op != "Placeholder":
            continue
        node.op = "VarHandleOp"
        node.attr.clear()
        node.attr["dtype"].type = tf.as_dtype(facts["dtype"]).as_datatype_enum
        node.attr["shape"].shape.CopyFrom(tf.TensorShape(facts["shape"]).as_proto())
        node.attr["shared_name"].s = facts["name"].encode()
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(graph_def, name="")
    return graph
