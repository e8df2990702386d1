"""A ``tf.distribute`` strategy the script builds (``MirroredStrategy``, ``MultiWorkerMirroredStrategy``) around
its ``model.fit`` or its ``strategy.run`` loop: made TensorFlow's default strategy (one replica, a no-op scope,
``run`` calls the function), so the script runs as one replica and autodist's plan distributes it.  The step
inside is captured by the kind that calls it (:mod:`autodist.loops.fit`, :mod:`autodist.loops.function`)."""

from __future__ import annotations

from autodist import hooks

NAME = "strategy"

# How its calls are intercepted: creating a replaced strategy gives the default one; ``hook(out, task_id)`` says so
# once on ``out`` and names this process worker ``task_id`` (see :func:`autodist.hooks.single_replica_strategies`).
hook = hooks.single_replica_strategies


def capturing(session):
    """Inside: the script's strategy is one replica while its step is captured (it makes no step itself)."""
    return hook()


def probing(grab, source):
    """Inside: the script's strategy is one replica while its step is probed."""
    return hook()
