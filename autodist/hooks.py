"""The hooks capture, profiling and the runtime install in TensorFlow and Keras, and running a user's script.

Every hook is a context manager: it is installed on entry and what it
replaced is restored on exit, however the block ends.  Importing this module
patches nothing.

- :func:`patched`: one attribute replaced (the way every hook here is made);
- :func:`keras_fit`: ``keras.Model.fit`` calls go to a handler;
- :func:`keras_compile`: what ``keras.Model.compile`` calls ask for as ``jit_compile`` goes to a handler;
- :func:`optimizer_apply`: Keras optimizers' ``apply`` (behind
  ``apply_gradients``) goes to a handler;
- :func:`counting_updates`: what each Keras optimizer ``apply`` updates, counted per variable;
- :func:`training_steps`: calls of the script's training step (an
  ``autodist.function``, or any ``tf.function`` of the script's own code
  whose trace applies gradients with a Keras optimizer) go to a handler;
- :func:`layer_calls`: calls of Keras layers go to a handler (the runtime
  builds a layer's ops on its op group's device);
- :func:`keras_take`: ``keras.ops.take`` (what ``Embedding`` looks rows up
  with) goes to a handler (the runtime gathers a PS variable's rows on its
  parameter servers);
- :func:`dataset_repeat`: ``tf.data.Dataset.repeat`` goes to a handler (a
  replica reshuffles each repetition from seeds of its own iterator,
  launcher.runtime.reshuffle);
- :func:`single_replica_strategies`: ``MirroredStrategy`` and
  ``MultiWorkerMirroredStrategy`` are TensorFlow's default strategy (one
  replica, no-op scope), so that autodist's plan distributes the script;
- :func:`run_script`: a script run as ``python script args`` would run it.

Which hooks each kind of training loop (``model.fit``, a ``tf.function``
step, a script's strategy) installs, and what capture, the profiling probe
and the runtime do with its calls: :mod:`autodist.loops`.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys

# Top-level packages whose tf.functions are never the script's training step
# (Keras' own train function, the runtime's replica steps).
_FRAMEWORK_PACKAGES = frozenset({"tensorflow", "keras", "tf_keras", "autodist", "launcher", "cost_models",
                                 "placement"})

# The handler of training-step calls while :func:`training_steps` is active (None outside).
_step_handler = None


@contextlib.contextmanager
def patched(owner, name, replacement):
    """Inside: ``owner.name`` is ``replacement``; yields what ``owner.name`` was.

    On exit the attribute is put back as it was: restored where ``owner``
    held it itself, removed again where it was inherited.
    """
    owned = name in vars(owner)
    own_value = vars(owner).get(name)
    original = getattr(owner, name)
    setattr(owner, name, replacement)
    try:
        yield original
    finally:
        if owned:
            setattr(owner, name, own_value)
        else:
            delattr(owner, name)


@contextlib.contextmanager
def keras_fit(handler):
    """Inside: ``model.fit(*args, **kwargs)`` is ``handler(model, *args, **kwargs)``; yields Keras' own fit."""
    import keras

    def fit(model, *args, **kwargs):
        return handler(model, *args, **kwargs)

    with patched(keras.Model, "fit", fit) as original:
        yield original


@contextlib.contextmanager
def keras_compile(record):
    """Inside: ``model.compile(...)`` is Keras' own, after ``record(model, jit_compile)`` gets the ``jit_compile``
    the call asked for ("auto" when it passed none), before Keras resolves "auto" for this host."""
    import inspect

    import keras

    def compile(model, *args, **kwargs):
        call = inspect.signature(original).bind(model, *args, **kwargs)
        call.apply_defaults()
        record(model, call.arguments.get("jit_compile", "auto"))
        return original(model, *args, **kwargs)

    with patched(keras.Model, "compile", compile) as original:
        yield original


@contextlib.contextmanager
def optimizer_apply(handler):
    """Inside: a Keras optimizer's ``apply(grads, variables)`` is ``handler(original, optimizer, grads, variables)``.

    ``apply_gradients`` calls ``apply``, so both are covered; ``original`` is
    Keras' own ``apply``.
    """
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    original = BaseOptimizer.apply

    def apply(optimizer, grads, trainable_variables=None):
        return handler(original, optimizer, grads, trainable_variables)

    with patched(BaseOptimizer, "apply", apply):
        yield


@contextlib.contextmanager
def layer_calls(handler):
    """Inside: calling a Keras layer, ``layer(*args, **kwargs)``, is ``handler(original, layer, args, kwargs)``."""
    import keras

    def call(layer, *args, **kwargs):
        return handler(original, layer, args, kwargs)

    with patched(keras.layers.Layer, "__call__", call) as original:
        yield


@contextlib.contextmanager
def keras_take(handler):
    """Inside: ``keras.ops.take(x, indices, axis)`` is ``handler(original, x, indices, axis)``.

    ``x`` is what the caller passed: an ``Embedding`` passes its variable
    itself, which inside ``stateless_call`` reads the value it was given.
    """
    from keras.src import backend

    def take(x, indices, axis=None):
        return handler(original, x, indices, axis)

    with patched(backend.numpy, "take", take) as original:
        yield


@contextlib.contextmanager
def dataset_repeat(handler):
    """Inside: ``dataset.repeat(count, name=name)`` of a ``tf.data.Dataset`` is ``handler(original, dataset, count,
    name)``; ``original`` is TensorFlow's own ``repeat``."""
    import tensorflow as tf

    def repeat(dataset, count=None, name=None):
        return handler(original, dataset, count, name)

    with patched(tf.data.Dataset, "repeat", repeat) as original:
        yield


# The tf.distribute strategies that :func:`single_replica_strategies` makes TensorFlow's default strategy: the
# data-parallel ones whose replicas autodist's plan replaces (subclasses included).
REPLACED_STRATEGIES = ("MirroredStrategy", "MultiWorkerMirroredStrategy")


@contextlib.contextmanager
def single_replica_strategies(out=None, task_id=0):
    """Inside: creating a :data:`REPLACED_STRATEGIES` strategy gives TensorFlow's default strategy.

    Its ``scope()`` changes nothing, ``num_replicas_in_sync`` is 1, ``run``
    calls the function and ``experimental_distribute_dataset`` returns the
    dataset: the script runs as one replica, which autodist's plan
    distributes.  Its ``cluster_resolver`` says this process is worker
    ``task_id`` (a replica's rank; 0, the chief, where one process runs the
    script), so that a script that writes files only on its chief
    (``task_type == "worker" and task_id == 0``) does so in one replica.
    The first creation prints one line saying so (to ``out``, default stdout).
    """
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(tf.train.ClusterSpec({}), task_type="worker",
                                                                    task_id=task_id)
    told = []

    def new(cls, *args, **kwargs):
        if not told:
            told.append(cls)
            print(f"autodist: the script's {cls.__name__} runs as one replica; autodist's plan distributes it",
                  file=out or sys.stdout, flush=True)
        return tf.distribute.get_strategy()

    with contextlib.ExitStack() as stack:
        for name in REPLACED_STRATEGIES:
            stack.enter_context(patched(getattr(tf.distribute, name), "__new__", new))
        stack.enter_context(patched(type(tf.distribute.get_strategy()), "cluster_resolver",
                                    property(lambda strategy: resolver)))
        yield


def _tf_function_type():
    import tensorflow as tf

    return type(tf.function(lambda: None))


def _is_script_code(fn):
    """Whether a tf.function's python function is the script's code, not TensorFlow's, Keras' or autodist's."""
    module = getattr(getattr(fn, "python_function", None), "__module__", None) or ""
    return module.partition(".")[0] not in _FRAMEWORK_PACKAGES


@contextlib.contextmanager
def counting_updates():
    """Inside: every outermost Keras optimizer ``apply``, traced or run, counted per variable it updates and per
    graph it is traced in (a tf.function that creates its optimizer's variables is traced twice: each trace counts
    apart; a loss-scaling wrapper's call of its inner optimizer is the same update); yields
    ``{graph: {variable name: applies}}``."""
    import tensorflow as tf

    from autodist.graph.naming import variable_name

    counts, depth = {}, [0]

    def apply(original, optimizer, grads, variables):
        if not depth[0]:
            in_graph = counts.setdefault(tf.compat.v1.get_default_graph(), {})
            for v in (list(variables) if variables is not None else optimizer._trainable_variables):
                in_graph[variable_name(v)] = in_graph.get(variable_name(v), 0) + 1
        depth[0] += 1
        try:
            return original(optimizer, grads, variables)
        finally:
            depth[0] -= 1

    with optimizer_apply(apply):
        yield counts


# The traces applies_gradients made, by graph (a tf.function's trace is cached: capture, tracing the same call
# again, gets the same graph and finds what it updates here, updates_counted).
_COUNTED = {}


def applies_gradients(fn, args, kwargs):
    """Whether tracing ``fn`` (a tf.function) on ``args`` calls a Keras optimizer's ``apply``.

    The trace is tf.function's own (cached for these arguments); what it updates is kept (:func:`updates_counted`).
    """
    with counting_updates() as counts:
        fn.get_concrete_function(*args, **kwargs)
    _COUNTED.update((id(graph), (graph, updates)) for graph, updates in counts.items())
    return bool(counts)


def updates_counted(graph):
    """``{variable name: applies}`` of a trace :func:`applies_gradients` made, by its ``graph``; {} for another."""
    kept = _COUNTED.get(id(graph))
    return kept[1] if kept is not None and kept[0] is graph else {}


def step_options(step):
    """The ``tf.function`` options of a training step (an ``autodist.function`` or a ``tf.function``)."""
    options = getattr(step, "options", None)
    if options is not None:
        return dict(options)
    jit = getattr(step, "_jit_compile", None)
    return {} if jit is None else {"jit_compile": jit}


@contextlib.contextmanager
def training_steps(handler):
    """Inside: every call of the script's training step is ``handler(step, args, kwargs)``.

    A training step is an ``autodist.function`` (it asks :func:`step_handler`
    itself), or a ``tf.function`` of the script's own code, called outside
    any other traced function, whose trace calls a Keras optimizer's
    ``apply``: a ``GradientTape`` step that ends in ``apply_gradients``.  Each
    tf.function is checked once, on its first call; others run as they would.
    """
    global _step_handler
    kind = _tf_function_type()
    checked = {}  # id of a tf.function -> (the function, is it a training step)

    def call(fn, *args, **kwargs):
        import tensorflow as tf

        if tf.inside_function() or not _is_script_code(fn):
            return original(fn, *args, **kwargs)
        if id(fn) not in checked:
            checked[id(fn)] = (fn, applies_gradients(fn, args, kwargs))
        if checked[id(fn)][1]:
            return handler(fn, args, kwargs)
        return original(fn, *args, **kwargs)

    previous = _step_handler
    with patched(kind, "__call__", call) as original:
        _step_handler = handler
        try:
            yield
        finally:
            _step_handler = previous


def step_handler():
    """The handler of training-step calls while :func:`training_steps` is active, else None."""
    return _step_handler


def run_script(path, args=()):
    """Run the script at ``path`` as ``__main__`` with ``sys.argv[1:]`` = ``args``, as ``python path args`` would.

    ``sys.argv``, ``sys.path`` (the script's folder first) and ``KERAS_BACKEND`` are restored after.  The script
    sees ``KERAS_BACKEND`` name the backend Keras runs; where it sets another, one line says that Keras keeps its own.
    """
    import keras

    saved_argv, saved_path, saved_backend = sys.argv[:], sys.path[:], os.environ.get("KERAS_BACKEND")
    sys.argv = [path, *map(str, args)]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    os.environ["KERAS_BACKEND"] = keras.backend.backend()
    try:
        runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        _say_backend_kept(path, keras.backend.backend())
        if saved_backend is None:
            os.environ.pop("KERAS_BACKEND", None)
        else:
            os.environ["KERAS_BACKEND"] = saved_backend


def _say_backend_kept(path, backend):
    """One line where the script set ``KERAS_BACKEND`` to another backend than ``backend``, the one Keras runs:
    Keras chose it when autodist imported Keras, before the script ran, so the script's model is built, captured
    and trained on it whatever the script asks."""
    asked = os.environ.get("KERAS_BACKEND", backend)
    if asked != backend:
        print(f"autodist: {path} sets KERAS_BACKEND={asked}, but Keras was imported on {backend} before the script "
              f"ran: its model is built, captured, priced and trained on {backend}", file=sys.stderr, flush=True)
