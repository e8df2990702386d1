"""The runtime's side of each kind of training loop (:mod:`autodist.loops`), one module per kind.

Each module is registered against its kind's ``NAME`` and holds:

- ``replica(run)``: the hook a replica of a collective run installs
  (:class:`launcher.runtime.worker.CollectiveRun` is ``run``): the kind's
  calls run as this replica's;
- ``one_client(client)``: the hook the single client of any other plan
  installs (``client`` is a :class:`OneClient`).

:func:`replica` and :func:`one_client` install every kind's, in the order of
:data:`autodist.loops.KINDS`; the runtime names no kind itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from autodist import loops
from launcher.runtime.loops import fit, function, strategy

# kind name -> its runtime side; one per kind of autodist.loops.KINDS
SIDES = {side.NAME: side for side in (fit, function, strategy)}


@dataclass
class OneClient:
    """What the single client's hooks need: the plan's layout and path, where to write the run's record, and why
    the plan does not run on collectives."""

    layout: object
    plan_path: str
    report_path: str | None
    not_collective: str


def replica(run):
    """Inside: every kind's calls run as ``run``'s replica; yields ``{kind name: what its hook yielded}``."""
    return loops.every_kind((kind, SIDES[kind.NAME].replica(run)) for kind in loops.KINDS)


def one_client(client):
    """Inside: every kind's calls run from ``client``, the plan's single client; yields as :func:`replica`."""
    return loops.every_kind((kind, SIDES[kind.NAME].one_client(client)) for kind in loops.KINDS)
