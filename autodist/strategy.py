"""Strategy: how one job is spread over a cluster, as a small serialisable record.

A strategy says, with logical device names only:

- ``replicas``: the data-parallel replicas; each replica is a list of devices,
  and op group ``g`` of a replica runs on ``replica[group_slots[g]]`` (slot 0
  when the group is not listed).  Pure data parallelism is one device per
  replica and no ``group_slots``.
- ``ps_devices``: the device of each parameter-server task (usually a node's
  CPU); PS task ``k`` is ``ps_devices[k]``.
- ``sync``: per trainable variable, how its gradient is synchronised.
- ``micro_batches``: the parts each replica cuts its slice of a step's batch
  into, accumulating their gradients before one synchronisation (None: as the
  job says, ``JobInfo.micro_batches``).

Search (placement/) produces strategies; the plan (autodist.plan) and the
launcher consume them.  Nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import NamedTuple

from autodist.errors import InputError, PlacementError

SYNC_METHODS = ("ps", "allreduce")
ALLREDUCE_ALGORITHMS = ("ring", "hierarchical", "master")
# Wire formats of an allreduced gradient: as computed, or cast to 16 bits before the
# collective and back after (Horovod's Compression.fp16); 2 bytes per element on the wire.
COMPRESSIONS = ("none", "fp16", "bf16")
WIRE_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
# How an allreduced sparse gradient travels: its rows all-gathered, or densified and summed.
SPARSE_SYNCS = ("gather", "dense")


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
    fused into one collective.  ``compression`` (``none``, ``fp16`` or
    ``bf16``) is the gradient's dtype on the wire: the runtime casts it before
    the collective and back after; variables of one bucket that differ in it
    go as separate collectives.  ``sparse_sync`` is how an allreduced sparse
    gradient (``IndexedSlices``) travels: ``gather`` (every replica's rows
    all-gathered, as ``MultiWorkerMirroredStrategy`` does) or ``dense``
    (densified and summed with its bucket, then a dense update); a dense
    gradient ignores it.
    """

    method: str
    ps_tasks: tuple = ()
    axis: int = 0
    algorithm: str = "ring"
    bucket: int = 0
    compression: str = "none"
    sparse_sync: str = "gather"

    @property
    def shards(self):
        return len(self.ps_tasks) if self.method == "ps" else 1


class CollectiveKey(NamedTuple):
    """What makes one collective: allreduced variables whose keys are equal are fused and sent as one.

    ``bucket``: their ``VarSync.bucket``; ``slot``: the replica slot the
    collective runs on (the runtimes hold allreduced variables on slot 0,
    and every reader keys them so); ``compression``: the wire
    format; ``algorithm``: how the collective runs.  Keys sort in the order
    the runtimes issue the collectives (bucket first).  The simulator, the
    plan, the report's pricing and the runtime's layout all group by it.
    """

    bucket: int
    slot: int
    compression: str
    algorithm: str

    @classmethod
    def of(cls, sync, slot=0):
        """The key of an allreduced variable's ``sync`` (a VarSync, or anything with its bucket, compression
        and algorithm) at ``slot``."""
        return cls(sync.bucket, slot, sync.compression, sync.algorithm)


def _is_index(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _sync_problems(sync, ps_count):
    """``(key, message)`` for what is wrong with one VarSync, given the number of PS tasks."""
    if sync.method not in SYNC_METHODS:
        yield "method", f"unknown method {sync.method!r} (one of {', '.join(SYNC_METHODS)})"
    elif sync.method == "ps":
        if not sync.ps_tasks or not all(_is_index(t) and t < ps_count for t in sync.ps_tasks):
            yield "ps_tasks", f"must name 1 or more PS tasks from 0 to {ps_count - 1}, got {list(sync.ps_tasks)}"
        if not _is_index(sync.axis):
            yield "axis", f"must be an integer >= 0, got {sync.axis!r}"
        if sync.compression != "none":
            yield "compression", f"applies to allreduced gradients only, got {sync.compression!r} for a PS variable"
        if sync.sparse_sync != "gather":
            yield "sparse_sync", f"applies to allreduced gradients only, got {sync.sparse_sync!r} for a PS variable"
    else:
        if sync.algorithm not in ALLREDUCE_ALGORITHMS:
            yield "algorithm", f"unknown allreduce algorithm {sync.algorithm!r} (one of {', '.join(ALLREDUCE_ALGORITHMS)})"
        if not _is_index(sync.bucket):
            yield "bucket", f"must be an integer >= 0, got {sync.bucket!r}"
        if sync.compression not in COMPRESSIONS:
            yield "compression", f"unknown compression {sync.compression!r} (one of {', '.join(COMPRESSIONS)})"
        if sync.sparse_sync not in SPARSE_SYNCS:
            yield "sparse_sync", f"unknown sparse_sync {sync.sparse_sync!r} (one of {', '.join(SPARSE_SYNCS)})"


def _sync_dict(sync):
    """One VarSync as plain data; ``compression`` and ``sparse_sync`` only where they are not ``none`` and
    ``gather`` (older plans stay byte-identical)."""
    out = {**asdict(sync), "ps_tasks": list(sync.ps_tasks)}
    if sync.compression == "none":
        del out["compression"]
    if sync.sparse_sync == "gather":
        del out["sparse_sync"]
    return out


@dataclass
class Strategy:
    """A complete placement of one job (see the module docstring)."""

    replicas: list
    sync: dict
    ps_devices: list = field(default_factory=list)
    group_slots: dict = field(default_factory=dict)
    micro_batches: int | None = None

    def allreduces_everything(self):
        """Every variable allreduced and every replica on one device: the plans that run on collective ops."""
        return (all(s.method == "allreduce" for s in self.sync.values())
                and all(len(replica) == 1 for replica in self.replicas))

    def collectives(self, slot_of=None):
        """``{CollectiveKey: [variable names, sorted]}`` of the allreduced variables, in issue order.

        ``slot_of``: each variable's replica slot (None: every variable on slot 0).
        """
        out = {}
        for name, s in sorted(self.sync.items()):
            if s.method == "allreduce":
                out.setdefault(CollectiveKey(s.bucket, slot_of[name] if slot_of else 0, s.compression, s.algorithm),
                               []).append(name)
        return dict(sorted(out.items()))

    def devices_of(self, group):
        """The device of op group ``group`` in each replica."""
        slot = self.group_slots.get(group, 0)
        return [replica[slot] for replica in self.replicas]

    def validate(self, graph_item, resource_spec):
        """Raise PlacementError unless every name and index is consistent."""
        trainable = {v.name for v in graph_item.trainable_variables()}
        for field, message in self.problems({d.name for d in resource_spec.devices()}, trainable):
            raise PlacementError(f"{field}: {message}")

    def problems(self, device_names, variables):
        """``(field, message)`` for every inconsistency, first to last.

        Parameters
        ----------
        device_names : set of str
            The cluster's logical devices.
        variables : set of str
            The trainable variables, each of which must be synchronised exactly once.
        """
        seen = {}
        for r, replica in enumerate(self.replicas):
            for j, dev in enumerate(replica):
                field = f"strategy.replicas[{r}][{j}]"
                if dev not in device_names:
                    yield field, f"device {dev!r} is not in the cluster"
                elif dev in seen:
                    yield field, f"device {dev!r} is already in replica {seen[dev]}: replicas must be disjoint"
                seen[dev] = r
        if not self.replicas or not all(self.replicas):
            yield "strategy.replicas", "every replica needs a device, and there must be one"
        for k, dev in enumerate(self.ps_devices):
            if dev not in device_names:
                yield f"strategy.ps_devices[{k}]", f"device {dev!r} is not in the cluster"
        for name in sorted(variables - set(self.sync)):
            yield "strategy.sync", f"variable {name!r} has no synchronisation"
        for var, s in sorted(self.sync.items()):
            field = f"strategy.sync.{var}"
            if var not in variables:
                yield field, f"names unknown variable {var!r}"
            for key, message in _sync_problems(s, len(self.ps_devices)):
                yield f"{field}.{key}", message
        for group, slot in sorted(self.group_slots.items()):
            if any(not 0 <= slot < len(replica) for replica in self.replicas):
                yield f"strategy.group_slots.{group}", f"slot {slot} outside its replica"
        if self.micro_batches is not None and not (_is_index(self.micro_batches) and self.micro_batches >= 1):
            yield "strategy.micro_batches", f"must be an integer >= 1, got {self.micro_batches!r}"

    # -- serialisation ---------------------------------------------------
    def to_dict(self):
        out = {
            "replicas": [list(r) for r in self.replicas],
            "ps_devices": list(self.ps_devices),
            "sync": {name: _sync_dict(s) for name, s in sorted(self.sync.items())},
            "group_slots": dict(sorted(self.group_slots.items())),
        }
        if self.micro_batches is not None:  # absent: as the job says (older plans stay byte-identical)
            out["micro_batches"] = self.micro_batches
        return out

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
                micro_batches=data.get("micro_batches"),
            )
        except (KeyError, TypeError) as exc:
            raise InputError(f"malformed strategy ({exc})", source=where, field="strategy") from None
