"""Strategy: how one job is spread over a cluster, as a small serialisable record.

A strategy says, with logical device names only:

- ``replicas``: the data-parallel replicas; each replica is a list of devices,
  and op group ``g`` of a replica runs on ``replica[group_slots[g]]`` (slot 0
  when the group is not listed).  Pure data parallelism is one device per
  replica and no ``group_slots``.
- ``ps_devices``: the device of each parameter-server task (usually a node's
  CPU); PS task ``k`` is ``ps_devices[k]``.
- ``sync``: per trainable variable, how its gradient is synchronised.

Search (placement/) produces strategies; the plan (autodist.plan) and the
launcher consume them.  Nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from autodist.errors import InputError, PlacementError

SYNC_METHODS = ("ps", "allreduce")
ALLREDUCE_ALGORITHMS = ("ring", "hierarchical", "master")


@dataclass(frozen=True)
class VarSync:
    """How one variable is synchronised.

    For ``method="ps"``: the variable is split into ``len(ps_tasks)`` shards
    along ``axis`` (1 shard: unpartitioned) and shard ``i`` lives on PS task
    ``ps_tasks[i]``.  For ``method="allreduce"``: ``algorithm`` is one of
    ``ring`` (flat ring over every replica), ``hierarchical`` (reduce-scatter
    inside each node over NVLink/PCIe, allreduce between nodes over the NIC,
    all-gather inside) or ``master`` (reduce to one GPU per node, allreduce
    between those, broadcast inside); gradients of the same ``bucket`` are
    fused into one collective.
    """

    method: str
    ps_tasks: tuple = ()
    axis: int = 0
    algorithm: str = "ring"
    bucket: int = 0

    @property
    def shards(self):
        return len(self.ps_tasks) if self.method == "ps" else 1


@dataclass
class Strategy:
    """A complete placement of one job (see the module docstring)."""

    replicas: list
    sync: dict
    ps_devices: list = field(default_factory=list)
    group_slots: dict = field(default_factory=dict)

    def allreduces_everything(self):
        """Every variable allreduced and every replica on one device: the plans that run on collective ops."""
        return (all(s.method == "allreduce" for s in self.sync.values())
                and all(len(replica) == 1 for replica in self.replicas))

    def devices_of(self, group):
        """The device of op group ``group`` in each replica."""
        slot = self.group_slots.get(group, 0)
        return [replica[slot] for replica in self.replicas]

    def validate(self, graph_item, resource_spec):
        """Raise PlacementError unless every name and index is consistent."""
        names = {d.name for d in resource_spec.devices()}
        for r, replica in enumerate(self.replicas):
            for dev in replica:
                if dev not in names:
                    raise PlacementError(f"replica {r} names unknown device {dev!r}")
        for k, dev in enumerate(self.ps_devices):
            if dev not in names:
                raise PlacementError(f"PS task {k} names unknown device {dev!r}")
        trainable = {v.name for v in graph_item.trainable_variables()}
        missing = sorted(trainable - set(self.sync))
        if missing:
            raise PlacementError(f"variable {missing[0]!r} has no synchronisation")
        for var, s in self.sync.items():
            if var not in trainable:
                raise PlacementError(f"sync names unknown variable {var!r}")
            if s.method not in SYNC_METHODS:
                raise PlacementError(f"variable {var!r}: unknown method {s.method!r}")
            if s.method == "ps":
                if not s.ps_tasks or any(not 0 <= t < len(self.ps_devices) for t in s.ps_tasks):
                    raise PlacementError(f"variable {var!r}: PS task out of range")
            elif s.algorithm not in ALLREDUCE_ALGORITHMS:
                raise PlacementError(f"variable {var!r}: unknown allreduce algorithm {s.algorithm!r}")
        for group, slot in self.group_slots.items():
            if any(not 0 <= slot < len(replica) for replica in self.replicas):
                raise PlacementError(f"op group {group!r}: slot {slot} outside its replica")

    # -- serialisation ---------------------------------------------------
    def to_dict(self):
        return {
            "replicas": [list(r) for r in self.replicas],
            "ps_devices": list(self.ps_devices),
            "sync": {
                name: {**asdict(s), "ps_tasks": list(s.ps_tasks)} for name, s in sorted(self.sync.items())
            },
            "group_slots": dict(sorted(self.group_slots.items())),
        }

    @classmethod
    def from_dict(cls, data, where="<strategy>"):
        try:
            sync = {
                name: VarSync(**{**s, "ps_tasks": tuple(s.get("ps_tasks", ()))})
                for name, s in data["sync"].items()
            }
            return cls(
                replicas=[list(r) for r in data["replicas"]],
                sync=sync,
                ps_devices=list(data.get("ps_devices", [])),
                group_slots=dict(data.get("group_slots", {})),
            )
        except (KeyError, TypeError) as exc:
            raise InputError(f"malformed strategy ({exc})", source=where, field="strategy") from None
