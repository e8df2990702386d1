"""What one simulated step gives: :class:`SimResult`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


class Expanded(Mapping):
    """A read-only dict built by ``build()`` on first use (a search reads only a step's times and memory)."""

    def __init__(self, build):
        self._build = build
        self._items = None

    def _all(self):
        if self._items is None:
            self._items = self._build()
        return self._items

    def __getitem__(self, key):
        return self._all()[key]

    def __iter__(self):
        return iter(self._all())

    def __len__(self):
        return len(self._all())

    def __repr__(self):
        return repr(self._all())


@dataclass
class SimResult:
    """The simulated step.

    ``step_time``: seconds from the step's start to its last event;
    ``compute_time``: when the slowest replica finishes forward and backward;
    ``exposed_comm_time``: ``step_time - compute_time - client_time`` (sync
    and updates not hidden behind compute); ``client_time``: the fixed cost of
    the loop that drives the step (one client's dispatch to every task, or
    for plans on collective ops every replica's own fit or step loop); ``cpu_bound``: ``(pool, seconds)`` where
    the CPU of cores that its processes share (an emulated node's, named by the node, or ``"this machine"``'s)
    sets the step time (Simulator._cpu_floor), else ``()``; ``link_busy`` / ``device_busy``: seconds each
    resource is occupied; ``memory``: peak bytes per device; ``memory_limit``:
    each used device's capacity; ``events``: ``(name, category, resource,
    start, end)`` tuples of one replica per class plus every transfer.
    """

    step_time: float
    compute_time: float
    exposed_comm_time: float
    link_busy: dict
    device_busy: dict
    memory: dict
    memory_limit: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    replicas: int = 1
    client_time: float = 0.0
    cpu_bound: tuple = ()

    @property
    def over_memory(self):
        """Devices whose memory use exceeds their capacity, with the excess bytes."""
        return {d: used - self.memory_limit[d] for d, used in self.memory.items() if used > self.memory_limit[d]}

    @property
    def fits(self):
        return not self.over_memory

    def to_dict(self):
        return {
            "step_time": self.step_time,
            "compute_time": self.compute_time,
            "exposed_comm_time": self.exposed_comm_time,
            "client_time": self.client_time,
            "replicas": self.replicas,
            "link_busy": dict(sorted(self.link_busy.items())),
            "device_busy": dict(sorted(self.device_busy.items())),
            "memory": dict(sorted(self.memory.items())),
        }
