"""Tracing a training step into a GraphItem (capture_step and what the other ways in share)."""

from __future__ import annotations

import inspect
import os

from autodist import hooks
from autodist.errors import AutoDistError, CaptureError, first_line
from autodist.graph import amp_rewrite
from autodist.graph.analysis import analyse_variables, assign_phases
from autodist.graph.item import GraphItem, JobInfo
from autodist.graph.job_options import gpu_env
from autodist.graph.loops import attach, loop_records
from autodist.graph.naming import step_variables, variable_name
from autodist.graph.tfgraph import has_calls, inlined_graph, live_ops, op_infos, variable_facts


def _shape_list(shape):
    return [-1 if d is None else int(d) for d in shape]


def spec_of(value):
    """A ``tf.TensorSpec`` for an array or tensor; any other value is returned as is (a ``tf.Variable`` too: the
    step is traced with the variable itself, as the script calls it, not with a tensor it could not assign)."""
    import tensorflow as tf

    if isinstance(value, (tf.TensorSpec, tf.Variable)):
        return value
    if tf.is_tensor(value) or (hasattr(value, "shape") and hasattr(value, "dtype")):
        return tf.TensorSpec(tuple(value.shape), tf.as_dtype(value.dtype))
    return value


def shapes_of(specs):
    """JSON-ready shapes of a nested structure of TensorSpecs (others dropped)."""
    import tensorflow as tf

    if isinstance(specs, tf.TensorSpec):
        return _shape_list(specs.shape)
    if isinstance(specs, dict):
        out = {str(k): shapes_of(v) for k, v in specs.items()}
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(specs, (list, tuple)):
        out = [shapes_of(v) for v in specs]
        return [v for v in out if v is not None] or None
    return None


def _batch_size(specs):
    import tensorflow as tf

    for spec in tf.nest.flatten(specs):
        if isinstance(spec, tf.TensorSpec) and spec.shape.rank and spec.shape[0] is not None:
            return int(spec.shape[0])
    return 0


def _at_other_batch(specs, batch, other):
    """``specs`` with every leading dimension of ``batch`` made ``other`` (the step's inputs at another batch)."""
    import tensorflow as tf

    def rebatched(spec):
        if isinstance(spec, tf.TensorSpec) and spec.shape.rank and spec.shape[0] == batch:
            return tf.TensorSpec([other, *spec.shape[1:]], spec.dtype)
        return spec

    return tf.nest.map_structure(rebatched, specs)


def pinned_batch(traced, specs, kwspecs, batch):
    """Why the step cannot run at another batch than ``batch``, or "" where it can.

    A step that writes its batch into a shape (``tf.reshape(x, [BATCH, SEQ,
    H, D])``: a Reshape to a constant shape holding the batch, on a tensor
    that carries it) fails to trace at another batch; Keras layers, which
    take the batch from their input, do not.  The step is traced (not run)
    at twice the batch, and the cause of a failure is the answer.
    """
    if batch < 1:
        return ""
    other = 2 * batch
    try:
        traced.get_concrete_function(*_at_other_batch(specs, batch, other), **_at_other_batch(kwspecs, batch, other))
    except Exception as exc:  # any failure of a trace that worked at the captured batch: the batch is pinned
        cause = _trace_failure(exc).split(" for '{{node")[0]  # TensorFlow's node dump follows the cause
        return f"tracing it at batch {other} fails{cause}"
    return ""


def _referenced_objects(python_fn):
    """Objects a step function closes over, names as globals, or is bound to."""
    fn = inspect.unwrap(python_fn)
    objects = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ()) if _cell_full(c)]
    code = getattr(fn, "__code__", None)
    if code is not None:
        objects += [fn.__globals__[n] for n in code.co_names if n in fn.__globals__]
    bound = getattr(python_fn, "__self__", None)
    if bound is not None:
        objects.append(bound)
    return objects


def _optimizer_name(objects, variables):
    """Class name of the Keras optimizer among ``objects``.

    Falls back on the Keras 3 naming of optimizer state, ``<optimizer>/iteration``.
    """
    import keras

    for obj in objects:
        if isinstance(obj, keras.optimizers.Optimizer):
            return type(obj).__name__
        if isinstance(obj, keras.Model) and getattr(obj, "optimizer", None) is not None:
            return type(obj.optimizer).__name__
    for var in variables:
        prefix, _, last = var.name.rpartition("/")
        if last == "iteration" and not var.trainable:
            return prefix
    return ""


def _model_weight_names(objects):
    """Names of the weights of the Keras models among ``objects``."""
    import keras

    return {variable_name(weight) for obj in objects if isinstance(obj, keras.Model) for weight in obj.weights}


def _cell_full(cell):
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _build_optimizer_first(objects):
    """Create the optimizer's slots before tracing, as ``model.fit`` does.

    A step that creates variables while tracing is traced twice by
    ``tf.function``; building the optimizer of the (one, built) Keras model
    the step uses avoids the second trace.
    """
    import keras

    models = {id(o): o for o in objects if isinstance(o, keras.Model) and o.built}
    optimizers = {id(o): o for o in objects if isinstance(o, keras.optimizers.Optimizer)}
    optimizers.update({id(m.optimizer): m.optimizer for m in models.values() if getattr(m, "optimizer", None)})
    if len(models) == 1 and len(optimizers) == 1:
        model, optimizer = next(iter(models.values())), next(iter(optimizers.values()))
        if not optimizer.built:
            optimizer.build(model.trainable_variables)


def item_from_graph(concrete, variables, job, model_weights=None):
    """GraphItem of a traced concrete function whose captures include ``variables``.

    Nested function calls are inlined first, and the ops the step does not
    run are left out (autodist.graph.tfgraph.live_ops).  ``model_weights``
    names the model's own variables; without it, the trainable ones.
    """
    import tensorflow as tf

    graph = concrete.graph
    by_handle = {id(v.handle): v for v in variables}
    named = step_variables(variables, job.source)
    handles = {}
    for external, internal in graph.captures:
        if internal.dtype == tf.resource and id(external) in by_handle:
            var = by_handle[id(external)]
            name, trainable = named[id(var)]
            facts = dict(variable_facts(var, name), trainable=trainable)
            if model_weights is not None:
                facts["model_weight"] = facts["trainable"] or facts["name"] in model_weights
            handles[internal.op.name] = facts
    inlined = has_calls(graph) or job.amp_rewrite
    if inlined:  # a graph the rewrite returns must know its variables' shapes
        graph = inlined_graph(concrete, handles)
    if job.amp_rewrite:
        graph = amp_rewrite.rewritten(graph, [t.name for t in concrete.outputs])
    roots = [t.name.rpartition(":")[0] for t in concrete.outputs] + [op.name for op in concrete.graph.control_outputs]
    live = live_ops(graph, roots)
    ops = {op.name: op for op in op_infos(graph) if op.name in live}
    assign_phases(ops)
    # The inliner clears the loops' lowering attribute; TensorFlow lowers every loop a step runs outside XLA.
    loops = [loop for loop in loop_records(graph, lowered=not job.xla if inlined else None) if loop.op in ops]
    attach(list(ops.values()), loops)
    return GraphItem(list(ops.values()), analyse_variables(ops, handles), job, loops)


def _named_shapes(python_fn, specs, kwspecs):
    """Input shapes keyed by the step's parameter names (``argN`` where unknown)."""
    try:
        params = list(inspect.signature(python_fn).parameters)
    except (TypeError, ValueError):
        params = []
    named = {}
    for i, spec in enumerate(specs):
        shapes = shapes_of(spec)
        if shapes is not None:
            named[params[i] if i < len(params) else f"arg{i}"] = shapes
    for key, spec in kwspecs.items():
        shapes = shapes_of(spec)
        if shapes is not None:
            named[key] = shapes
    return named


# Keras dtype policy -> the job precision it computes in (autodist.graph.item.JobInfo).
POLICY_PRECISION = {"mixed_float16": "fp16", "float16": "fp16", "mixed_bfloat16": "bf16", "bfloat16": "bf16"}


def precision_facts():
    """``(precision, dtype policy name)`` of the running script.

    The Keras global dtype policy decides mixed precision; otherwise float32
    products run on TF32 tensor cores where TensorFlow allows it (its
    default, ``tf.config.experimental.enable_tensor_float_32_execution``).
    """
    import keras
    import tensorflow as tf

    policy = keras.mixed_precision.global_policy().name
    tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
    return POLICY_PRECISION.get(policy, "tf32" if tf32 else "fp32"), policy


def trace_step(traced, args, kwargs, model_name, source, optimizer=None, input_shapes=None, step="function",
               xla=False, collective_only=False, jit=None):
    """Trace ``traced`` (a tf.function) on ``args``/``kwargs`` and build its GraphItem.

    ``optimizer`` and ``input_shapes`` override what is found from the
    function itself (``model.fit`` knows them better); ``step`` says how the
    script trains (``"fit"`` or ``"function"``, see :class:`JobInfo`);
    ``xla`` whether the step runs compiled by XLA here, ``jit`` how Keras decides it per device
    (autodist.loops.fit.keras_jit_facts); ``collective_only``
    whether the runtime runs it on collective ops only (a script's custom loop).
    """
    import tensorflow as tf

    passed = [v for v in tf.nest.flatten((args, kwargs)) if isinstance(v, tf.Variable) and v.trainable]
    if passed:
        raise CaptureError(f"the step is given trainable tf.Variable {passed[0].name!r} as an argument; autodist "
                           "places and sums the gradients of the variables a step reads from its model or closure, "
                           "not of its arguments (read it there, or run the script without autodist)",
                           source=source)
    objects = _referenced_objects(traced.python_function)
    _build_optimizer_first(objects)
    specs = tf.nest.map_structure(spec_of, tuple(args))
    kwspecs = tf.nest.map_structure(spec_of, dict(kwargs))
    try:
        with hooks.counting_updates() as updates:
            concrete = traced.get_concrete_function(*specs, **kwspecs)
    except AutoDistError:
        raise
    except Exception as exc:  # the user's step failed to trace: say how, in one line
        raise CaptureError(f"tracing the step failed{_trace_failure(exc)}", source=source) from None
    if input_shapes is None:
        input_shapes = _named_shapes(traced.python_function, specs, kwspecs)
    # where the training-step hook traced this call first, TensorFlow's cached trace applied nothing anew
    updates = updates.get(concrete.graph) or hooks.updates_counted(concrete.graph)
    variables = concrete.graph.variables
    precision, policy = precision_facts()
    rewrite = amp_rewrite.enabled()
    if rewrite and precision not in ("fp16", "bf16"):
        precision = "fp16"
    job = JobInfo(
        model_name=model_name,
        batch_size=_batch_size((specs, kwspecs)),
        input_shapes=input_shapes,
        optimizer=optimizer or _optimizer_name(objects, variables),
        tf_version=tf.__version__,
        source=source,
        step=step,
        precision=precision,
        dtype_policy=policy,
        xla=bool(xla),
        amp_rewrite=rewrite,
        gpu_env=gpu_env(os.environ),
        collective_only=collective_only,
        batch_pinned=pinned_batch(traced, specs, kwspecs, _batch_size((specs, kwspecs))),
        updates_per_step={name: times for name, times in updates.items() if times > 1},
        **(jit or {}),
    )
    return item_from_graph(concrete, variables, job, _model_weight_names(objects) or None)


def _trace_failure(exc):
    """``": <error>"`` for a step that failed to trace; ``" at FILE:LINE: <cause>"`` for TensorFlow's
    "in user code:" errors, which give the frames (the script's own first), then the cause on their last line."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if not lines or lines[0] != "in user code:" or len(lines) < 2:
        return f": {first_line(exc)}"
    frames = [line.split('"') for line in lines if line.startswith('File "')]
    own = [f for f in frames if len(f) > 2 and "-packages/" not in f[1]]
    where = ""
    if own:
        line = own[0][2].split(",")[1].strip().removeprefix("line ") if "," in own[0][2] else ""
        where = f" at {own[0][1]}:{line}" if line else f" at {own[0][1]}"
    return f"{where}: {lines[-1]}"


def _as_tf_function(fn):
    import tensorflow as tf

    if hasattr(fn, "get_concrete_function"):  # a tf.function, or an autodist.function
        return fn
    return tf.function(fn)


def capture_step(fn, *example_args, model_name=""):
    """Trace one training step and return it as a GraphItem.

    Parameters
    ----------
    fn : callable
        The step: forward pass, tape gradients and ``apply_gradients``.  A
        plain function, a ``tf.function`` or an :func:`function`.
    *example_args
        Arguments of one call (arrays, tensors or TensorSpecs); their shapes
        fix the traced batch shape.  The step is traced, never run.
    model_name : str, optional

    Returns
    -------
    GraphItem
    """
    traced = _as_tf_function(fn)
    name = getattr(fn, "__name__", type(fn).__name__)
    return trace_step(traced, example_args, {}, model_name or name, f"capture_step:{name}",
                      xla=bool(getattr(traced, "_jit_compile", False)))
