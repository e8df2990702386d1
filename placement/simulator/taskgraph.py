"""The step as data: a strategy lowered into what one step runs, before anything is timed.

A :class:`StepGraph` holds the compute of each replica class (its
schedule: op groups in dependency order, activations between devices), one
:class:`Collective` per fused bucket in the order the runtime issues them,
one :class:`PsVariable` per variable synchronised through parameter
servers, whether one client feeds every replica its input, and the client's
dispatch per step.  :meth:`StepGraph.lines` prints it; the event engine
(placement.simulator.run) runs it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from autodist.strategy import CollectiveKey


class Collective(NamedTuple):
    """One fused allreduce: its key (autodist.strategy.CollectiveKey), variables, devices, and the sparse
    gradients among them whose rows are all-gathered."""

    key: CollectiveKey
    variables: tuple
    devices: tuple
    gathered: tuple


class PsVariable(NamedTuple):
    """A variable whose shards are pushed to, updated on and pulled from PS tasks; ``slot``: its unit's slot."""

    variable: str
    slot: int


@dataclass
class StepGraph:
    """One step of a strategy as plain data (see the module docstring)."""

    classes: list  # (compute Schedule, replicas running it)
    collectives: list
    ps_variables: list
    collective_ops: bool  # every variable allreduced, one device per replica: each replica runs its own step
    client_time: float

    @property
    def feeds(self):
        """Whether one client sends every replica its input (the plans not on collective ops)."""
        return not self.collective_ops

    def lines(self):
        """The graph, one task per line."""
        out = [f"client dispatch {self.client_time:.6g} s"] if self.client_time else []
        for schedule, members in self.classes:
            out.append(f"compute {len(members)} replica(s) like {members[0]}: ends at {schedule.end:.6g} s")
        for c in self.collectives:
            k = c.key
            out.append(f"allreduce {k.algorithm} bucket {k.bucket} slot {k.slot} {k.compression}: "
                       f"{len(c.variables)} variable(s) over {len(c.devices)} devices"
                       + (f", {len(c.gathered)} gathered" if c.gathered else ""))
        out += [f"ps {p.variable} slot {p.slot}" for p in self.ps_variables]
        if self.feeds:
            out.append("input fed to every replica by the client")
        return out


def lower(simulator, strategy, classes, var_slot):
    """The :class:`StepGraph` of ``strategy`` over its replica ``classes`` (``var_slot``: each variable's slot,
    None where all are on slot 0)."""
    problem = simulator.problem
    ps_variables = [PsVariable(name, var_slot[name] if var_slot else 0)
                    for name, s in sorted(strategy.sync.items()) if s.method != "allreduce"]
    # issued in key order (bucket first), as the runtimes run them (launcher.runtime.collective, .trainer), over
    # the replicas' first devices, where the runtimes hold every allreduced variable whatever its unit's slot
    collectives = [Collective(key, tuple(names), simulator.slot_devices(strategy.replicas, key.slot),
                              problem.gathered(strategy, names))
                   for key, names in strategy.collectives().items()]
    collective_ops = strategy.allreduces_everything()
    return StepGraph(classes, collectives, ps_variables, collective_ops,
                     problem.client_time(strategy, collective_ops))
