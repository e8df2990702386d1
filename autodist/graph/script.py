"""Capture from a running script: its ``model.fit`` call or its training step (see :mod:`autodist.hooks`)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import threading
import traceback

from autodist import hooks
from autodist.errors import AutoDistError, CaptureError, first_line
from autodist.graph import amp_rewrite
from autodist.graph.batch import first_batch
from autodist.graph.item import ONE_CLIENT_FIT_ARGS
from autodist.graph.trace import shapes_of, spec_of, trace_step

# How long a script may run before it reaches its training step (seconds).
DEFAULT_TIMEOUT_S = 600.0

# The runtime that runs steps under a plan, if any (set only inside steps_run_by).
_runtime = None


class _StopScript(BaseException):
    """Raised inside a script once its step is captured; a BaseException so that
    the script's own ``except Exception`` cannot swallow it."""


class _TimedOut(BaseException):
    """Raised inside a script whose capture ran out of time (a BaseException, as _StopScript)."""


@contextlib.contextmanager
def _time_limit(seconds):
    """Raise _TimedOut in the main thread after ``seconds``; no limit in another thread (no signals there)."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise _TimedOut

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


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


@contextlib.contextmanager
def steps_run_by(runtime):
    """Inside: every call of the script's training step goes to ``runtime.call_step(step, args, kwargs)``.

    The step is an ``autodist.function`` or a ``tf.function`` that applies
    gradients (see :func:`autodist.hooks.training_steps`).
    """
    global _runtime
    _runtime = runtime
    try:
        with hooks.training_steps(runtime.call_step):
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


def function(func=None, **options):
    """Decorator for a training step: ``tf.function`` outside capture.

    Inside :func:`capture_script`, the first call is traced and recorded as
    the script's step, and the script stops there.  A ``tf.function`` step
    that ends in ``optimizer.apply_gradients`` is found without it; mark
    steps that update their variables otherwise.  ``options`` go to
    ``tf.function`` (e.g. ``jit_compile``); usable bare or with options.
    """
    if func is None:
        return functools.partial(function, **options)
    return _StepFunction(func, options)


@contextlib.contextmanager
def _without_loss_scaling(model):
    """Trace ``model``'s step with the optimizer a ``LossScaleOptimizer`` wraps, if it has one.

    Keras compiles ``mixed_float16`` models with a LossScaleOptimizer, whose
    update runs inside a ``tf.cond`` (skip the step on overflow): a branch
    function whose ops a capture cannot see, variable updates included.  The
    step captured with the inner optimizer has the same forward, backward and
    update ops; it lacks the loss scale's finiteness check and unscaling, two
    elementwise passes over the gradients.
    """
    import keras

    wrapper = model.optimizer
    if isinstance(wrapper, keras.optimizers.LossScaleOptimizer):
        model.optimizer = wrapper.inner_optimizer
    try:
        yield
    finally:
        model.optimizer = wrapper


def keras_jit_facts(model, asked=None):
    """The JobInfo fields that say how Keras compiles ``model``'s step (autodist.graph.xla): ``asked`` is the
    ``jit_compile`` its ``compile`` call asked for (None: not seen, the model's own setting)."""
    from keras.src.trainers.trainer import model_supports_jit

    asked = model.jit_compile if asked is None else asked
    strategy = getattr(model, "_distribute_strategy", None)
    return {"jit_compile": "auto" if asked == "auto" else ("on" if asked else "off"),
            "jit_supported": bool(model_supports_jit(model)),
            "distribute_strategy": type(strategy).__name__ if strategy is not None else ""}


def fit_step_item(model, x, y, batch_size, sample_weight, model_name, source, jit_compile=None):
    """The GraphItem of the step ``model.fit(x, y, batch_size, sample_weight=...)`` would run (traced, not run);
    ``jit_compile``: what the model's ``compile`` asked for (see :func:`keras_jit_facts`)."""
    import tensorflow as tf

    if getattr(model, "optimizer", None) is None:
        raise CaptureError("model.fit was called on a model that is not compiled", source=source)
    data, names = first_batch(x, y, sample_weight, batch_size, source=source)
    specs = tf.nest.map_structure(spec_of, data)
    shapes = {n: shapes_of(s) for n, s in zip(names, specs if isinstance(specs, tuple) else (specs,))}
    # a part of unknown shape (a pandas DataFrame) is left out, as shapes_of leaves out a nested one
    shapes = {n: s for n, s in shapes.items() if s is not None}
    traced = tf.function(model.train_step)
    with _without_loss_scaling(model):
        return trace_step(traced, (specs,), {}, model_name, source, optimizer=type(model.optimizer).__name__,
                          input_shapes=shapes, step="fit", xla=model.jit_compile,
                          jit=keras_jit_facts(model, jit_compile))


class _ScriptCapture:
    """State of one capture_script run and the hooks it installs."""

    def __init__(self, path):
        self.source = path
        self.model_name = os.path.splitext(os.path.basename(path))[0]
        self.item = None
        self.jit_asked = {}  # id of a compiled model -> the jit_compile its compile call asked for

    def step_source(self):
        """``script:line`` of the innermost line of the script on the stack (the call being captured)."""
        target = os.path.abspath(self.source)
        lines = [f.lineno for f in traceback.extract_stack() if os.path.abspath(f.filename) == target]
        return f"{self.source}:{lines[-1]}" if lines else self.source

    def capture_fit(self, model, x=None, y=None, batch_size=None, *args, sample_weight=None, **kwargs):
        self.item = fit_step_item(model, x, y, batch_size, sample_weight, self.model_name, self.step_source(),
                                  self.jit_asked.get(id(model)))
        given = dict(kwargs, sample_weight=sample_weight)
        in_data = "sample_weight" in self.item.job.input_shapes  # a dataset of (x, y, sample_weight)
        self.item.job.fit_arguments = [a for a in ONE_CLIENT_FIT_ARGS
                                       if given.get(a) is not None or (a == "sample_weight" and in_data)]
        raise _StopScript

    def record_compile(self, model, jit_compile):
        """What ``model.compile`` asked for as ``jit_compile`` (before Keras resolves "auto" for this host)."""
        self.jit_asked[id(model)] = jit_compile

    def capture_step(self, step, args, kwargs):
        """The script's training step (an ``autodist.function`` or a ``tf.function``): trace it and stop."""
        self.item = trace_step(step, args, kwargs, self.model_name, self.step_source(),
                               xla=hooks.step_options(step).get("jit_compile") or False, collective_only=True)
        raise _StopScript

    @contextlib.contextmanager
    def installed(self):
        """Send ``keras.Model.fit`` and the training step's calls here; undo both on exit."""
        with hooks.keras_fit(self.capture_fit), hooks.keras_compile(self.record_compile), \
                hooks.training_steps(self.capture_step), \
                hooks.single_replica_strategies():
            yield


def _script_line(exc, path):
    """Line of the script where ``exc`` came from (the innermost frame in the script)."""
    line = None
    target = os.path.abspath(path)
    for frame in traceback.extract_tb(exc.__traceback__):
        if os.path.abspath(frame.filename) == target:
            line = frame.lineno
    return line


def capture_script(path, args=(), timeout_s=DEFAULT_TIMEOUT_S):
    """Run a training script in capture mode and return its first step.

    Parameters
    ----------
    path : str or path-like
        A script that trains with ``model.fit``, or calls a ``tf.function``
        training step (tape gradients, ``apply_gradients``) or a step
        decorated with :func:`function`.
    args : sequence of str
        The script's command-line arguments (``sys.argv[1:]``).
    timeout_s : float or None
        Stop the script if its step is not captured within this many seconds
        (None: no limit).  Only in the main thread, where signals arrive.

    Returns
    -------
    GraphItem

    Raises
    ------
    CaptureError
        The script is missing, raises, exits, ends without training or runs
        out of time.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CaptureError("no such script", source=path)
    session = _ScriptCapture(path)
    amp_rewrite.allow_without_gpu()
    try:
        with session.installed(), _time_limit(timeout_s):
            hooks.run_script(path, args)
    except _StopScript:
        pass
    except _TimedOut:
        raise CaptureError(f"script did not reach its training step within {timeout_s:g} s "
                           "(stopped; give more time with --timeout)", source=path) from None
    except AutoDistError:
        raise
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise CaptureError(f"script exited with status {exc.code!r} before training", source=path) from None
    except Exception as exc:
        line = _script_line(exc, path)
        where = f"{path}:{line}" if line else path
        raise CaptureError(f"script raised {first_line(exc)}", source=where) from None
    if session.item is None and {"-h", "--help"} & set(map(str, args)):
        raise CaptureError("the script showed its own help (above) and exited before training; nothing to capture",
                           source=path)
    if session.item is None:
        raise CaptureError(
            "script finished without training (no model.fit call, and no tf.function step that calls "
            "optimizer.apply_gradients or is marked with autodist.function)",
            source=path,
        )
    return session.item
