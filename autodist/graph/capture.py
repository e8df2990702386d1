"""Capture one training step of a TensorFlow program as a GraphItem.

Three ways in:

* :func:`capture_step` traces a python step function (forward, tape gradients,
  ``apply_gradients``) with example arguments;
* :func:`capture_script` runs an unchanged ``model.fit`` script, or a custom
  loop whose step is decorated with :func:`function`, and stops it at its
  first training step;
* :func:`load_graph` reads a graph.json, a GraphDef or a SavedModel.

TensorFlow is imported only inside these functions; the hooks of
:func:`capture_script` exist only while it runs.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import runpy
import sys
import traceback

from autodist.errors import AutoDistError, CaptureError
from autodist.graph.analysis import analyse_variables, assign_phases
from autodist.graph.batch import first_batch
from autodist.graph.item import GraphItem, JobInfo
from autodist.graph.loaders import load_graph
from autodist.graph.tfgraph import has_calls, inlined_graph, op_infos, variable_facts

__all__ = ["capture_step", "capture_script", "function", "load_graph"]

# The script capture that is running, if any (set only inside capture_script).
_active = None


class _StopScript(BaseException):
    """Raised inside a script once its step is captured; a BaseException so that
    the script's own ``except Exception`` cannot swallow it."""


def _shape_list(shape):
    return [-1 if d is None else int(d) for d in shape]


def _spec_of(value):
    import tensorflow as tf

    if isinstance(value, tf.TensorSpec):
        return value
    if tf.is_tensor(value) or (hasattr(value, "shape") and hasattr(value, "dtype")):
        return tf.TensorSpec(tuple(value.shape), tf.as_dtype(value.dtype))
    return value


def _shapes_of(specs):
    """JSON-ready shapes of a nested structure of TensorSpecs (others dropped)."""
    import tensorflow as tf

    if isinstance(specs, tf.TensorSpec):
        return _shape_list(specs.shape)
    if isinstance(specs, dict):
        out = {str(k): _shapes_of(v) for k, v in specs.items()}
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(specs, (list, tuple)):
        out = [_shapes_of(v) for v in specs]
        return [v for v in out if v is not None] or None
    return None


def _batch_size(specs):
    import tensorflow as tf

    for spec in tf.nest.flatten(specs):
        if isinstance(spec, tf.TensorSpec) and spec.shape.rank and spec.shape[0] is not None:
            return int(spec.shape[0])
    return 0


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
    """Names of the ``tf.Variable``s behind the weights of the Keras models among ``objects``."""
    import keras

    names = set()
    for obj in objects:
        if isinstance(obj, keras.Model):
            for weight in obj.weights:
                names.add(variable_facts(getattr(weight, "value", weight))["name"])
    return names


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

    Nested function calls are inlined first.  ``model_weights`` names the
    model's own variables; without it, the trainable ones.
    """
    import tensorflow as tf

    graph = concrete.graph
    by_handle = {id(v.handle): v for v in variables}
    handles = {}
    for external, internal in graph.captures:
        if internal.dtype == tf.resource and id(external) in by_handle:
            facts = variable_facts(by_handle[id(external)])
            if model_weights is not None:
                facts["model_weight"] = facts["trainable"] or facts["name"] in model_weights
            handles[internal.op.name] = facts
    if has_calls(graph):
        graph = inlined_graph(concrete, handles)
    ops = {op.name: op for op in op_infos(graph)}
    assign_phases(ops)
    return GraphItem(list(ops.values()), analyse_variables(ops, handles), job)


def _trace(traced, args, kwargs, model_name, source, optimizer=None, input_shapes=None):
    import tensorflow as tf

    objects = _referenced_objects(traced.python_function)
    _build_optimizer_first(objects)
    specs = tf.nest.map_structure(_spec_of, tuple(args))
    kwspecs = tf.nest.map_structure(_spec_of, dict(kwargs))
    try:
        concrete = traced.get_concrete_function(*specs, **kwspecs)
    except AutoDistError:
        raise
    except Exception as exc:  # the user's step failed to trace: say how, in one line
        raise CaptureError(f"tracing the step failed: {_one_line(exc)}", source=source) from None
    if input_shapes is None:
        try:
            params = list(inspect.signature(traced.python_function).parameters)
        except (TypeError, ValueError):
            params = []
        named = {}
        for i, spec in enumerate(specs):
            shapes = _shapes_of(spec)
            if shapes is not None:
                named[params[i] if i < len(params) else f"arg{i}"] = shapes
        named.update({k: v for k, v in ((k, _shapes_of(s)) for k, s in kwspecs.items()) if v is not None})
        input_shapes = named
    variables = concrete.graph.variables
    job = JobInfo(
        model_name=model_name,
        batch_size=_batch_size((specs, kwspecs)),
        input_shapes=input_shapes,
        optimizer=optimizer or _optimizer_name(objects, variables),
        tf_version=tf.__version__,
        source=source,
    )
    return item_from_graph(concrete, variables, job, _model_weight_names(objects) or None)


def _as_tf_function(fn):
    import tensorflow as tf

    if isinstance(fn, _StepFunction):
        return fn._tf_function
    if hasattr(fn, "get_concrete_function"):
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
    return _trace(traced, example_args, {}, model_name or name, f"capture_step:{name}")


class _StepFunction:
    """A ``tf.function`` that, inside :func:`capture_script`, captures its first call."""

    def __init__(self, func, options):
        import tensorflow as tf

        self._tf_function = tf.function(func, **options)
        functools.update_wrapper(self, func)

    def __call__(self, *args, **kwargs):
        session = _active
        if session is not None and session.item is None:
            session.item = _trace(self._tf_function, args, kwargs, session.model_name, session.source)
            raise _StopScript
        return self._tf_function(*args, **kwargs)

    def __get__(self, instance, owner):
        return self if instance is None else functools.partial(self, instance)

    def __getattr__(self, name):
        return getattr(self._tf_function, name)


def function(func=None, **options):
    """Decorator for a training step: ``tf.function`` outside capture.

    Inside :func:`capture_script`, the first call is traced and recorded as
    the script's step, and the script stops there.  ``options`` go to
    ``tf.function`` (e.g. ``jit_compile``); usable bare or with options.
    """
    if func is None:
        return functools.partial(function, **options)
    return _StepFunction(func, options)


class _ScriptCapture:
    """State of one capture_script run and the fit hook it installs."""

    def __init__(self, path):
        self.source = path
        self.model_name = os.path.splitext(os.path.basename(path))[0]
        self.item = None

    def capture_fit(self, model, x=None, y=None, batch_size=None, sample_weight=None):
        import tensorflow as tf

        if getattr(model, "optimizer", None) is None:
            raise CaptureError("model.fit was called on a model that is not compiled", source=self.source)
        data, names = first_batch(x, y, sample_weight, batch_size, source=self.source)
        specs = tf.nest.map_structure(_spec_of, data)
        shapes = {n: _shapes_of(s) for n, s in zip(names, specs)}
        traced = tf.function(model.train_step)
        self.item = _trace(
            traced,
            (specs,),
            {},
            self.model_name,
            self.source,
            optimizer=type(model.optimizer).__name__,
            input_shapes=shapes,
        )
        raise _StopScript

    @contextlib.contextmanager
    def hooks(self):
        """Install the ``keras.Model.fit`` hook and mark this capture active; undo both on exit."""
        global _active
        import keras

        session = self

        def fit(model, x=None, y=None, batch_size=None, *args, sample_weight=None, **kwargs):
            return session.capture_fit(model, x, y, batch_size, sample_weight)

        owned = "fit" in vars(keras.Model)
        original = vars(keras.Model).get("fit")
        keras.Model.fit = fit
        _active = self
        try:
            yield
        finally:
            _active = None
            if owned:
                keras.Model.fit = original
            else:
                del keras.Model.fit


def _one_line(exc):
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _script_line(exc, path):
    """Line of the script where ``exc`` came from (the innermost frame in the script)."""
    line = None
    target = os.path.abspath(path)
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(frame.filename) == target:
            line = frame.lineno
    return line


def capture_script(path, args=()):
    """Run a training script in capture mode and return its first step.

    Parameters
    ----------
    path : str or path-like
        A script that trains with ``model.fit`` or calls a step decorated
        with :func:`function`.
    args : sequence of str
        The script's command-line arguments (``sys.argv[1:]``).

    Returns
    -------
    GraphItem

    Raises
    ------
    CaptureError
        The script is missing, raises, exits or ends without training.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CaptureError("no such script", source=path)
    session = _ScriptCapture(path)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [path, *map(str, args)]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        with session.hooks():
            runpy.run_path(path, run_name="__main__")
    except _StopScript:
        pass
    except AutoDistError:
        raise
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise CaptureError(f"script exited with status {exc.code!r} before training", source=path) from None
    except Exception as exc:
        line = _script_line(exc, path)
        where = f"{path}:{line}" if line else path
        raise CaptureError(f"script raised {_one_line(exc)}", source=where) from None
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    if session.item is None:
        raise CaptureError(
            "script finished without training (no model.fit call and no autodist.function step)",
            source=path,
        )
    return session.item
