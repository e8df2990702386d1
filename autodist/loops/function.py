"""A ``tf.function`` training step called from the script's own loop: a step that ends in
``optimizer.apply_gradients`` (found by its trace), or one marked with :func:`function`."""

from __future__ import annotations

import contextlib
import functools

from autodist import hooks
from autodist.errors import CaptureError
from autodist.graph.batch import is_batched
from autodist.graph.trace import trace_step

NAME = "function"

# How its calls are intercepted: a training step's call ``step(*args, **kwargs)`` is ``handler(step, args, kwargs)``.
hook = hooks.training_steps

# The runtime that runs steps under a plan, if any (set only inside steps_run_by).
_runtime = None


class _StepFunction:
    """A ``tf.function`` whose calls go to the handler of :func:`autodist.hooks.training_steps` where one is active."""

    def __init__(self, func, options):
        import tensorflow as tf

        self._tf_function = tf.function(func, **options)
        self.python_function = func
        self.options = dict(options)
        functools.update_wrapper(self, func)

    def __call__(self, *args, **kwargs):
        handler = hooks.step_handler()
        if handler is not None:
            return handler(self, args, kwargs)
        return self._tf_function(*args, **kwargs)

    def __get__(self, instance, owner):
        return self if instance is None else functools.partial(self, instance)

    def __getattr__(self, name):
        return getattr(self._tf_function, name)


def function(func=None, **options):
    """Decorator for a training step: ``tf.function`` outside capture.

    Inside :func:`autodist.graph.script.capture_script`, the first call is
    traced and recorded as the script's step, and the script stops there.  A
    ``tf.function`` step that ends in ``optimizer.apply_gradients`` is found
    without it; mark steps that update their variables otherwise.
    ``options`` go to ``tf.function`` (e.g. ``jit_compile``); usable bare or
    with options.
    """
    if func is None:
        return functools.partial(function, **options)
    return _StepFunction(func, options)


@contextlib.contextmanager
def steps_run_by(runtime):
    """Inside: every call of the script's training step goes to ``runtime.call_step(step, args, kwargs)``.

    The step is an ``autodist.function`` or a ``tf.function`` that applies
    gradients (see :func:`autodist.hooks.training_steps`).
    """
    global _runtime
    _runtime = runtime
    try:
        with hook(runtime.call_step):
            yield
    finally:
        _runtime = None


def is_chief():
    """True in the process that should write the run's files.

    Under a plan that runs on collectives every worker task runs the script;
    only the first one is the chief.  Outside ``autodist run`` (and in the
    single client of other plans) this is always True.
    """
    return _runtime is None or _runtime.first


def replica_rank():
    """This replica's index among :func:`replica_count` (0 outside ``autodist run`` and in a plan's single client).

    Under ``--batch-per-replica`` every replica runs the script's batch and must read data of its own, as with
    Horovod's ``hvd.rank()``: ``dataset.shard(autodist.replica_count(), autodist.replica_rank())`` in a custom
    loop (``model.fit`` deals its data out itself).
    """
    return 0 if _runtime is None else _runtime.rank


def replica_count():
    """How many replicas run the script (1 outside ``autodist run`` and in a plan's single client)."""
    return 1 if _runtime is None else _runtime.count


def _is_data(value):
    import tensorflow as tf

    return isinstance(value, (tf.data.Dataset, tf.data.Iterator))


def refuse_unbatched(step, args, kwargs, site, error):
    """Raise ``error`` (an AutoDistError class) where ``step``, called at ``site`` with ``args`` and ``kwargs``,
    is given no batch (no tensor or array with a leading dimension), where autodist captures, prices and splits a
    step a batch: it loops over a ``tf.data`` dataset or iterator inside one call (a whole epoch in one
    ``tf.function``), reads its data itself, or trains what it is given (tensorflow/docs' style transfer: an image
    ``tf.Variable``)."""
    import tensorflow as tf

    values = tf.nest.flatten((args, kwargs))
    if any(is_batched(v) for v in values):
        return
    name = getattr(getattr(step, "python_function", step), "__name__", "the step")
    if any(_is_data(v) for v in values):
        raise error(f"the training step {name} takes a tf.data dataset and loops over it inside one tf.function "
                    "(the data's batches in one call); autodist captures, prices and distributes one call a batch: "
                    f"call the step once per batch (for batch in dataset: {name}(batch))", source=site)
    trained = [v for v in values if isinstance(v, tf.Variable) and v.trainable]
    what = f"only tf.Variable {trained[0].name!r}, which it trains" if trained else "no tensor or array"
    raise error(f"the training step {name} is given no batch ({what}); autodist splits each call's batch among the "
                f"replicas: give the step its batch as an argument ({name}(batch)), or run the script without "
                "autodist", source=site)


def step_item(step, args, kwargs, model_name, source):
    """The GraphItem of one call of ``step`` (traced, not run), compiled as the step asks."""
    return trace_step(step, args, kwargs, model_name, source,
                      xla=hooks.step_options(step).get("jit_compile") or False, collective_only=True)


def capturing(session):
    """Inside: the first call of the script's training step is captured."""

    def call(step, args, kwargs):
        refuse_unbatched(step, args, kwargs, session.step_source(), CaptureError)
        session.captured(step_item(step, args, kwargs, session.model_name, session.step_source()))

    return hook(call)


def probing(grab, source):
    """Inside: the first call of the script's training step gives the probe the step and its arguments."""

    def call(step, args, kwargs):
        import tensorflow as tf

        refuse_unbatched(step, args, kwargs, source, CaptureError)
        grab(step, tuple(tf.nest.map_structure(tf.convert_to_tensor, args)))

    return hook(call)
