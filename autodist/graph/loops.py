"""The bodies of a step's loops and how many times they run (needs TensorFlow).

Inlining function calls (autodist.graph.tfgraph.inlined_graph) leaves a
``While`` / ``StatelessWhile`` op whole: its condition and body stay
functions of the graph's library.  Keras 3's recurrent layers (LSTM, GRU,
SimpleRNN, Bidirectional) run their time steps in such a loop
(keras/src/backend/tensorflow/rnn.py), and so does their gradient.  For each
loop this module records, as a :class:`~autodist.graph.item.LoopInfo`, what
one iteration runs and the trip count:

- the body's ops, with shapes: its function is imported with the loop's
  input shapes, a variable handle made a ``VarHandleOp`` of the variable's
  shape and a tensor list an empty list of its element shape (the handle
  data TensorFlow knows outside), so that shape inference reaches every op;
- the condition's ops, which run once per iteration too;
- where TensorFlow lowers the loop (the ``_lower_using_switch_merge``
  attribute ``while_v2`` sets outside XLA contexts: LowerFunctionalOpsPass,
  tensorflow/core/common_runtime/lower_while_op.cc), the control ops it
  lowers to, per loop variable and iteration: a ``Merge``, a ``Switch``, an
  ``Identity`` (the body's argument) and a ``NextIteration``, and one
  ``LoopCond``; unlowered, the body is a function call: an ``_Arg`` and a
  ``_Retval`` per variable;
- the trip count, where TensorFlow's graph fixes it: the condition compares
  a variable that starts at a static value and that the body steps by a
  constant with a static bound the loop does not change (``while_v2`` adds
  its counter against ``maximum_iterations`` to the condition; Keras passes
  the time steps as both that and its own bound).  A value is static when
  TensorFlow folds it (``tf.get_static_value``, else the constant-only
  subgraph that computes it is run), or when it is the counter (output 0)
  of a loop whose trips are known (a gradient loop runs as many times as
  its forward loop).  Where nothing fixes it, ``trips_known`` is False and
  the body is priced once.

Loops inside a body are recorded in the body's loop, the same way; an ``If``
inside a body is priced as its launch (its branches are not recorded).  On a
GPU, Keras' LSTM and GRU may run cuDNN's fused kernel (CudnnRNNV3) instead of
the loop when their arguments allow it; the capture, on this host's
TensorFlow, holds the loop, and the step is priced per that loop.
"""

from __future__ import annotations

import math

from autodist.graph.checks import LOOP_TYPES
from autodist.graph.item import LoopInfo, OpInfo
from autodist.graph.tfgraph import op_infos, shape_list, tensor_bytes

LOWERING_ATTR = "_lower_using_switch_merge"
# Comparisons a loop condition bounds a counter with: (counter side, inclusive).
_COMPARISONS = {"Less": (0, False), "LessEqual": (0, True), "Greater": (1, False), "GreaterEqual": (1, True)}


def loop_records(graph, lowered=None):
    """:class:`LoopInfo` of every loop op of ``graph`` (a ``tf.Graph`` with its library), in graph order.

    ``lowered``: whether TensorFlow lowers the loops when it runs the step;
    None reads each loop op's attribute (which the inliner, run with
    ``lower_control_flow=False``, clears: a caller that inlined says).
    """
    library = graph.as_graph_def().library
    functions = {f.signature.name: f for f in library.function}
    return _Loops(functions, library, lowered).of(graph, {})


def _walk(tensor, types=("Identity",)):
    """``tensor``, through ops of ``types`` to their first input."""
    while tensor.op.type in types and tensor.op.inputs:
        tensor = tensor.op.inputs[0]
    return tensor


class _Loops:
    """Builds the loop records of a graph and of the bodies of its loops (one library for all)."""

    def __init__(self, functions, library, lowered):
        self.functions = functions
        self.library = library
        self.lowered = lowered
        self.trips = {}  # loop op -> its trip count, where known (gradient loops read their forward loop's)
        self.lists = {}  # tensor -> (element dtype, element shape) of a tensor list whose handle data is lost

    def of(self, graph, known):
        """Records of ``graph``'s loop ops; ``known``: tensors of ``graph`` with a value fixed from outside."""
        records = []
        for op in graph.get_operations():
            if op.type in LOOP_TYPES and op.get_attr("body").name in self.functions:
                records.append(self.loop(op, known))
        return records

    def loop(self, op, known):
        """The LoopInfo of loop op ``op``."""
        import tensorflow as tf

        body, body_args, body_outputs = self.function_graph(op.get_attr("body").name, op.inputs)
        cond, cond_args, cond_outputs = self.function_graph(op.get_attr("cond").name, op.inputs)
        invariant = [_walk(out).op is arg for out, arg in zip(body_outputs, body_args)]
        initial = [self.value(t, known) for t in op.inputs]
        for tensor, output in zip(op.inputs, op.outputs):  # a list the loop carries keeps its elements' type
            spec = self.list_spec(tensor) if tensor.dtype == tf.variant else None
            if spec is not None:
                self.lists[output.ref()] = spec
        fixed = {arg.outputs[0].ref(): value for arg, value, same in zip(body_args, initial, invariant)
                 if value is not None and same}
        trips = self.trip_count(initial, invariant, fixed, body_args, body_outputs, cond_args, cond_outputs)
        if trips is not None:
            self.trips[op.name] = trips
        lowered = self.lowered
        if lowered is None:
            lowered = op.node_def.attr[LOWERING_ATTR].b if LOWERING_ATTR in op.node_def.attr else False
        records = self.iteration_ops(op, body, body_args, body_outputs, cond, cond_args, cond_outputs, lowered)
        loops = self.of(body, fixed)
        attach(records, loops)
        return LoopInfo(op=op.name, trips=trips if trips is not None else 1, trips_known=trips is not None,
                        lowered=lowered, ops=records, outputs=[t.name for t in body_outputs], loops=loops)

    # -- the functions, as graphs with shapes ------------------------------------------------------------------
    def function_graph(self, name, inputs):
        """The graph of library function ``name`` called on ``inputs``: (graph, argument ops, output tensors).

        A resource argument becomes a ``VarHandleOp`` of its variable's shape
        and dtype, a tensor list one ``EmptyTensorList`` of its element's
        (a ``Const`` beside it holds the shape), so that shapes reach the ops
        that read them; other arguments are placeholders of the input's shape.
        """
        import tensorflow as tf
        from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

        fdef = self.functions[name]
        graph_def, flat = function_def_to_graph_def(fdef, [t.shape for t in inputs])
        graph_def.library.CopyFrom(self.library)
        args = [a.name for a in fdef.signature.input_arg]
        nodes = {node.name: node for node in graph_def.node}
        for arg, tensor in zip(args, inputs):
            if tensor.dtype == tf.resource:
                spec = _resource_spec(tensor)
                if spec is not None:
                    _as_handle(nodes[arg], *spec)
            elif tensor.dtype == tf.variant:
                spec = self.list_spec(tensor)
                if spec is not None:
                    _as_list(graph_def, nodes[arg], *spec)
        graph = tf.Graph()
        with graph.as_default():
            tf.graph_util.import_graph_def(graph_def, name="")
        outputs = [graph.get_tensor_by_name(flat[fdef.ret[a.name]]) for a in fdef.signature.output_arg]
        return graph, [graph.get_operation_by_name(a) for a in args], outputs

    def list_spec(self, tensor):
        """(element dtype, element shape) of a tensor list, or None."""
        if tensor.ref() in self.lists:
            return self.lists[tensor.ref()]
        from tensorflow.python.ops import handle_data_util

        data = handle_data_util.get_resource_handle_data(tensor)
        if data is None or not data.is_set or not data.shape_and_type:
            return None
        item = data.shape_and_type[0]
        dims = None if item.shape.unknown_rank else [d.size for d in item.shape.dim]
        return item.dtype, dims

    # -- the trip count ----------------------------------------------------------------------------------------
    def value(self, tensor, known):
        """The static value of ``tensor`` (an int, or None): folded by TensorFlow, fixed from outside the
        function (``known``), or the counter (output 0) of a loop whose trips are known."""
        import tensorflow as tf

        tensor = _walk(tensor)
        if tensor.ref() in known:
            return known[tensor.ref()]
        if tensor.op.type in LOOP_TYPES and tensor.value_index == 0:
            return self.trips.get(tensor.op.name)
        if tensor.dtype not in (tf.int32, tf.int64):
            return None
        value = tf.get_static_value(tensor)
        if value is None:
            value = _folded(tensor, known)
        return int(value) if value is not None and getattr(value, "size", 1) == 1 else None

    def trip_count(self, initial, invariant, fixed, body_args, body_outputs, cond_args, cond_outputs):
        """Iterations of a loop whose variables start at ``initial`` (static values or None), or None where the
        graph does not fix them: the fewest any comparison of the condition allows, of a variable the body steps
        by a static amount against a static bound (see the module docstring).  ``invariant``: which variables
        the body hands on unchanged; ``fixed``: those of the body's arguments, at their static values."""
        bounds = []
        index = {arg.name: i for i, arg in enumerate(cond_args)}
        pending = [cond_outputs[0]] if cond_outputs else []
        while pending:
            tensor = _walk(pending.pop())
            if tensor.op.type == "LogicalAnd":
                pending += list(tensor.op.inputs)
                continue
            if tensor.op.type not in _COMPARISONS:
                continue
            side, inclusive = _COMPARISONS[tensor.op.type]
            counter, limit = _walk(tensor.op.inputs[side]), _walk(tensor.op.inputs[1 - side])
            i = index.get(counter.op.name)
            if i is None or initial[i] is None or i >= len(body_outputs):
                continue
            step = _step(body_outputs[i], body_args[i].outputs[0], fixed)
            j = index.get(limit.op.name)
            bound = (initial[j] if j is not None and invariant[j]
                     else self.value(limit, {}) if j is None else None)
            if step is None or step <= 0 or bound is None:
                continue
            span = bound - initial[i] + (1 if inclusive else 0)
            bounds.append(max(math.ceil(span / step), 0))
        return min(bounds) if bounds else None

    # -- what one iteration runs -------------------------------------------------------------------------------
    def iteration_ops(self, op, body, body_args, body_outputs, cond, cond_args, cond_outputs, lowered):
        """OpInfo of what one iteration of ``op`` runs (see the module docstring), in the order it runs them."""
        prefix = f"{op.name}/iteration"
        merges = [f"{prefix}/Merge_{i}" for i in range(len(body_args))]
        sources = merges if lowered else [arg.name for arg in body_args]
        renamed = {arg.name: source for arg, source in zip(cond_args, sources)}
        condition = []
        for info in _function_ops(cond, cond_args, keep_args=False):
            info.name = f"{prefix}/cond/{info.name}"
            info.inputs = [_renamed(t, renamed, f"{prefix}/cond/") for t in info.inputs]
            condition.append(info)
        args = {arg.name: i for i, arg in enumerate(body_args)}
        body_ops = _function_ops(body, body_args, keep_args=True)
        for info in body_ops:
            if info.name in args:
                info.type = "Identity" if lowered else "_Arg"
                info.inputs = [f"{prefix}/Switch_{args[info.name]}:1"] if lowered else []
        if not lowered:  # the arguments first: the condition reads them
            return body_ops + condition + [_control(f"{prefix}/Retval_{i}", "_Retval", out, [out.name])
                                           for i, out in enumerate(body_outputs)]
        predicate = _renamed(cond_outputs[0].name, renamed, f"{prefix}/cond/") if cond_outputs else None
        return ([_control(merge, "Merge", arg.outputs[0], []) for merge, arg in zip(merges, body_args)]
                + condition
                + [_control(f"{prefix}/LoopCond", "LoopCond", None, [predicate] if predicate else [])]
                + [_control(f"{prefix}/Switch_{i}", "Switch", arg.outputs[0], [f"{merge}:0", f"{prefix}/LoopCond:0"])
                   for i, (merge, arg) in enumerate(zip(merges, body_args))]
                + body_ops
                + [_control(f"{prefix}/NextIteration_{i}", "NextIteration", out, [out.name])
                   for i, out in enumerate(body_outputs)])


def attach(ops, loops):
    """Give the loop ops among ``ops`` (OpInfo records) what their ``loops`` run: FLOPs, the phase of their
    body's ops, and the bytes of the tensor lists their iterations append to (LoopInfo.kept_bytes)."""
    by_name = {op.name: op for op in ops}
    for loop in loops:
        op = by_name[loop.op]
        op.flops = loop.flops()
        _set_phase(loop, op.phase)
        for i, nbytes in loop.kept_bytes().items():
            if i < len(op.output_bytes):
                op.output_bytes[i] = nbytes


def _set_phase(loop, phase):
    for info in loop.ops:
        info.phase = phase
    for inner in loop.loops:
        _set_phase(inner, phase)


def _function_ops(graph, args, keep_args):
    """OpInfo of a function graph's ops, without the constants :func:`_as_list` added for its ``args`` and,
    unless ``keep_args``, without the arguments."""
    names = {arg.name for arg in args}
    skipped = {f"{name}/{helper}" for name in names for helper in ("element_shape", "max_elements")}
    skipped |= set() if keep_args else names
    return [info for info in op_infos(graph) if info.name not in skipped]


def _renamed(tensor, renamed, prefix):
    """A condition op's input: an argument becomes its ``Merge``, any other op gets ``prefix``."""
    control = tensor.startswith("^")
    name, _, index = tensor.lstrip("^").rpartition(":") if not control else (tensor[1:], "", "")
    if name in renamed:
        return f"^{renamed[name]}" if control else f"{renamed[name]}:0"
    return f"^{prefix}{name}" if control else f"{prefix}{name}:{index}"


def _control(name, op_type, like, inputs):
    """A control op of a lowered loop, with the shape of tensor ``like`` (a bool scalar where None); a
    ``Switch`` has two outputs (false, true), a ``Merge`` the value and the index it took."""
    if like is None:
        shapes, dtypes, nbytes = [[]], ["bool"], [1]
    else:
        shape = shape_list(like.shape)
        shapes, dtypes, nbytes = [shape], [like.dtype.name], [tensor_bytes(shape, like.dtype)]
    if op_type == "Switch":
        shapes, dtypes, nbytes = shapes * 2, dtypes * 2, nbytes * 2
    elif op_type == "Merge":
        shapes, dtypes, nbytes = shapes + [[]], dtypes + ["int32"], nbytes + [4]
    return OpInfo(name=name, type=op_type, inputs=inputs, output_shapes=shapes, output_dtypes=dtypes,
                  output_bytes=nbytes, scope=name.rpartition("/")[0])


def _step(output, arg, fixed):
    """The static amount a loop's body adds to the variable ``arg`` to give ``output``, or None; ``fixed``: the
    body's arguments of static value."""
    import tensorflow as tf

    tensor = _walk(output)
    if tensor.op.type not in ("Add", "AddV2") or len(tensor.op.inputs) != 2:
        return None
    a, b = (_walk(t) for t in tensor.op.inputs)
    for var, inc in ((a, b), (b, a)):
        if var.op is arg.op:
            value = fixed.get(inc.ref()) if inc.ref() in fixed else tf.get_static_value(inc)
            return int(value) if value is not None and getattr(value, "size", 1) == 1 else None
    return None


def _resource_spec(tensor):
    """(dtype enum, shape proto) of the variable behind a resource tensor, or None."""
    op = _walk(tensor).op
    if op.type == "VarHandleOp":
        return op.node_def.attr["dtype"].type, op.node_def.attr["shape"].shape
    from tensorflow.python.ops import handle_data_util

    data = handle_data_util.get_resource_handle_data(tensor)
    if data is None or not data.is_set or not data.shape_and_type:
        return None
    return data.shape_and_type[0].dtype, data.shape_and_type[0].shape


def _as_handle(node, dtype, shape):
    """Make placeholder ``node`` a ``VarHandleOp`` of a variable of ``dtype`` and ``shape``."""
    node.op = "VarHandleOp"
    node.attr.clear()
    node.attr["dtype"].type = dtype
    node.attr["shape"].shape.CopyFrom(shape)
    node.attr["shared_name"].s = node.name.encode()


def _as_list(graph_def, node, dtype, dims):
    """Make placeholder ``node`` an empty tensor list of ``dtype`` elements of shape ``dims`` (None: unknown)."""
    import tensorflow as tf

    shape = graph_def.node.add(name=f"{node.name}/element_shape", op="Const")
    value = tf.constant(dims if dims is not None else -1, dtype=tf.int32)
    shape.attr["dtype"].type = tf.int32.as_datatype_enum
    shape.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
    limit = graph_def.node.add(name=f"{node.name}/max_elements", op="Const")
    limit.attr["dtype"].type = tf.int32.as_datatype_enum
    limit.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(-1, dtype=tf.int32))
    node.op = "EmptyTensorList"
    node.attr.clear()
    node.input.extend([shape.name, limit.name])
    node.attr["element_dtype"].type = dtype
    node.attr["shape_type"].type = tf.int32.as_datatype_enum


def _folded(tensor, known):
    """The value of ``tensor`` where it is computed from constants and static shapes only (run in a session
    on that subgraph), else None."""
    import tensorflow as tf

    feeds, pending, seen = {}, [tensor], set()
    while pending:
        t = pending.pop()
        if t.ref() in seen:
            continue
        seen.add(t.ref())
        static = known.get(t.ref()) if t.ref() in known else tf.get_static_value(t)
        if static is not None:
            feeds[t.ref()] = static
            continue
        op = t.op
        if op._is_stateful or not op.inputs or any(i.dtype in (tf.resource, tf.variant) for i in op.inputs):
            return None
        pending += list(op.inputs)
    if tensor.ref() in feeds:
        return feeds[tensor.ref()]
    try:
        with tf.compat.v1.Session(graph=tensor.graph) as session:
            return session.run(tensor, feed_dict={ref.deref(): value for ref, value in feeds.items()})
    except Exception:  # anything TensorFlow cannot run alone from those values is not static
        return None
