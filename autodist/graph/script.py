"""Capture from a running script: the ``keras.Model.fit`` hook and ``autodist.function``."""

from __future__ import annotations

import contextlib
import functools
import os
import runpy
import signal
import sys
import threading
import traceback

from autodist.errors import AutoDistError, CaptureError, first_line
from autodist.graph.batch import first_batch
from autodist.graph.trace import shapes_of, spec_of, trace_step

# How long a script may run before it reaches its training step (seconds).
DEFAULT_TIMEOUT_S = 600.0

# The script capture that is running, if any (set only inside capture_script).
_active = None
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
    """A ``tf.function`` that, inside :func:`capture_script`, captures its first call."""

    def __init__(self, func, options):
        import tensorflow as tf

        self._tf_function = tf.function(func, **options)
        self.python_function = func
        self.options = dict(options)
        functools.update_wrapper(self, func)

    def __call__(self, *args, **kwargs):
        session = _active
        if session is not None and session.item is None:
            session.item = trace_step(self._tf_function, args, kwargs, session.model_name, session.source,
                                      xla=self.options.get("jit_compile", False))
            raise _StopScript
        if _runtime is not None:
            return _runtime.call_step(self, args, kwargs)
        return self._tf_function(*args, **kwargs)

    def __get__(self, instance, owner):
        return self if instance is None else functools.partial(self, instance)

    def __getattr__(self, name):
        return getattr(self._tf_function, name)


@contextlib.contextmanager
def steps_run_by(runtime):
    """Inside: every ``autodist.function`` call goes to ``runtime.call_step(step, args, kwargs)``."""
    global _runtime
    _runtime = runtime
    try:
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
    the script's step, and the script stops there.  ``options`` go to
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
        specs = tf.nest.map_structure(spec_of, data)
        shapes = {n: shapes_of(s) for n, s in zip(names, specs)}
        traced = tf.function(model.train_step)
        with _without_loss_scaling(model):
            self.item = trace_step(
                traced,
                (specs,),
                {},
                self.model_name,
                self.source,
                optimizer=type(model.optimizer).__name__,
                input_shapes=shapes,
                step="fit",
                xla=model.jit_compile,
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
        A script that trains with ``model.fit`` or calls a step decorated
        with :func:`function`.
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
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [path, *map(str, args)]
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    try:
        with session.hooks(), _time_limit(timeout_s):
            runpy.run_path(path, run_name="__main__")
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
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
    if session.item is None:
        raise CaptureError(
            "script finished without training (no model.fit call and no autodist.function step)",
            source=path,
        )
    return session.item
