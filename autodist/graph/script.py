"""Capture from a running script: its first training step, of whichever kind of loop (see :mod:`autodist.loops`)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import traceback

from autodist import hooks, loops
from autodist.errors import AutoDistError, CaptureError, first_line
from autodist.graph import amp_rewrite
from autodist.workdir import scratch_folder

# How long a script may run before it reaches its training step (seconds).
DEFAULT_TIMEOUT_S = 600.0


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


class _ScriptCapture:
    """State of one capture_script run: what every kind of training loop's capture hook needs
    (:func:`autodist.loops.capturing`)."""

    def __init__(self, path):
        self.source = path
        self.target = os.path.abspath(path)  # what the script's frames name, whatever folder it runs in
        self.model_name = os.path.splitext(os.path.basename(path))[0]
        self.item = None
        self.eager_update = None  # ``script:line`` of the first optimizer apply run eagerly, outside any tf.function

    def step_source(self):
        """``script:line`` of the innermost line of the script on the stack (the call being captured)."""
        lines = [f.lineno for f in traceback.extract_stack() if os.path.abspath(f.filename) == self.target]
        return f"{self.source}:{lines[-1]}" if lines else self.source

    def captured(self, item):
        """The script's step is ``item``: stop the script."""
        self.item = item
        raise _StopScript


@contextlib.contextmanager
def _eager_updates(session):
    """Inside: where a Keras optimizer first applies gradients eagerly (a loop with no tf.function step, as
    tensorflow/docs' custom training walkthrough writes it) is kept in ``session.eager_update``: such a loop has no
    step to trace, and the error that the script ended without training says where and what to wrap."""
    import tensorflow as tf

    def apply(original, optimizer, grads, variables):
        if session.eager_update is None and tf.executing_eagerly():
            session.eager_update = session.step_source()
        return original(optimizer, grads, variables)

    with hooks.optimizer_apply(apply):
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

    The script runs in a scratch folder that links each entry of the current
    one (:func:`autodist.workdir.scratch_folder`): it reads what is there, and
    what it writes before its step (saved weights, a generated data file) is
    removed with the folder, so that ``autodist run`` and ``autodist bench``,
    which capture before they train, leave no file for their replicas to share.

    Parameters
    ----------
    path : str or path-like
        A script that trains with ``model.fit``, or calls a ``tf.function``
        training step (tape gradients, ``apply_gradients``) or a step
        decorated with :func:`autodist.function`.
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
        with scratch_folder("autodist-capture-"), _eager_updates(session), loops.capturing(session), \
                _time_limit(timeout_s):
            hooks.run_script(session.target, args)
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
        line = _script_line(exc, session.target)
        where = f"{path}:{line}" if line else path
        raise CaptureError(f"script raised {first_line(exc)}", source=where) from None
    if session.item is None and {"-h", "--help"} & set(map(str, args)):
        raise CaptureError("the script showed its own help (above) and exited before training; nothing to capture",
                           source=path)
    if session.item is None and session.eager_update:
        raise CaptureError("script finished without a step to capture: its optimizer applies gradients eagerly, "
                           "outside any tf.function, so nothing can be traced; put the tape, its gradients and "
                           "apply_gradients in one function decorated with @tf.function (or @autodist.function) "
                           "and call that in the loop", source=session.eager_update)
    if session.item is None:
        raise CaptureError(
            "script finished without training (no model.fit call, and no tf.function step that calls "
            "optimizer.apply_gradients or is marked with autodist.function)",
            source=path,
        )
    return session.item
