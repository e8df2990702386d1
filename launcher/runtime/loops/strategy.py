"""The runtime's side of a script's own ``tf.distribute`` strategy (:mod:`autodist.loops.strategy`): one replica,
which the plan's replicas run."""

from __future__ import annotations

from autodist.loops import strategy

NAME = strategy.NAME


def replica(run):
    """Inside: the script's strategy is one replica, named as ``run``'s rank; the first replica says so."""
    return strategy.hook(run.console, task_id=run.group.rank)


def one_client(client):
    """Inside: the script's strategy is one replica, the client's."""
    return strategy.hook()
