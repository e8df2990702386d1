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

import bisect
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


class Lowering:
    """Lowers the strategies of one Simulator, each from the one lowered before it (FlexFlow's delta).

    A search's candidate differs from the strategy evaluated before it in a
    few variables' synchronisation: where the replica classes and slots are
    the ones of the graph before, only the collectives that hold a changed
    variable (before or after the change) are built again; the others are
    the same :class:`Collective` objects, which the run's caches know by
    identity.  ``incremental=False`` builds every graph from nothing (the
    full evaluation the tests hold it to).
    """

    def __init__(self, simulator, incremental=True):
        self.sim = simulator
        self.incremental = incremental
        self.base = None  # (classes, replicas, group_slots) of the lowering the state below belongs to
        self.sync = {}  # variable -> its VarSync as last lowered
        self.key_of = {}  # allreduced variable -> its CollectiveKey
        self.members = {}  # CollectiveKey -> its variables, sorted
        self.collectives = {}  # CollectiveKey -> Collective
        self.order = []  # the keys in issue order
        self.ps_variables = []

    def lower(self, strategy, classes, var_slot):
        """The :class:`StepGraph` of ``strategy`` over its replica ``classes`` (``var_slot``: each variable's
        slot, None where all are on slot 0)."""
        base = (classes, strategy.replicas, dict(strategy.group_slots))
        sync = strategy.sync
        same = (self.incremental and self.base is not None and self.base[0] is classes
                and self.base[1] is strategy.replicas and self.base[2] == strategy.group_slots
                and len(sync) == len(self.sync))
        changed = [name for name, s in sync.items() if self.sync.get(name) is not s] if same else None
        if changed is None or len(changed) > len(sync) // 4:
            self._reset(base, strategy, var_slot)
        else:
            self._update(strategy, var_slot, changed)
        collective_ops = not self.ps_variables and all(len(r) == 1 for r in strategy.replicas)
        return StepGraph(classes, [self.collectives[k] for k in self.order], self.ps_variables, collective_ops,
                         self.sim.problem.client_time(strategy, collective_ops))

    def _reset(self, base, strategy, var_slot):
        self.base, self.sync, self.key_of, self.members, self.collectives = base, {}, {}, {}, {}
        self.order, self.ps_variables = [], []
        self._update(strategy, var_slot, sorted(strategy.sync))

    def _update(self, strategy, var_slot, changed):
        """Move each ``changed`` variable to its new collective (or to the PS variables) and build again the
        collectives it left or joined."""
        touched, ps_changed = set(), False
        for name in changed:
            s = strategy.sync[name]
            old = self.key_of.pop(name, None)
            if old is not None:
                self.members[old].remove(name)
                touched.add(old)
            was_ps = name in self.sync and old is None
            self.sync[name] = s
            if s.method == "allreduce":
                # on the replicas' first devices, where the runtimes hold every allreduced variable whatever its
                # unit's slot (launcher.runtime.layout, .trainer)
                key = CollectiveKey.of(s)
                self.key_of[name] = key
                bisect.insort(self.members.setdefault(key, []), name)
                touched.add(key)
            ps_changed = ps_changed or was_ps != (s.method != "allreduce")
        problem, sim = self.sim.problem, self.sim
        keys_changed = False
        for key in touched:
            names = self.members[key]
            if not names:
                del self.members[key], self.collectives[key]
                keys_changed = True
                continue
            keys_changed = keys_changed or key not in self.collectives
            self.collectives[key] = Collective(key, tuple(names), sim.slot_devices(strategy.replicas, key.slot),
                                               problem.gathered(strategy, names))
        if keys_changed:
            self.order = sorted(self.collectives)  # issued in key order (bucket first), as the runtimes run them
        if ps_changed:
            self.ps_variables = [PsVariable(name, var_slot[name] if var_slot else 0)
                                 for name, s in sorted(self.sync.items()) if s.method != "allreduce"]
