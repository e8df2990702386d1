"""Where every variable and replica of a plan lives, as TensorFlow device strings.

Pure data: :class:`RunLayout` is what the in-task runtime needs from a
:class:`autodist.plan.Plan`, resolved once, without TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autodist.strategy import CollectiveKey



def canonical_device(device):
    """A TensorFlow device string in its one full spelling (imports TensorFlow)."""
    import tensorflow as tf

    return tf.DeviceSpec.from_string(device).to_string()


@dataclass(frozen=True)
class VariablePlacement:
    """One trainable variable.

    ``devices``: for ``method="ps"`` the device of each shard (split along
    ``axis``); for ``method="allreduce"`` the device of each replica's copy.
    ``sparse``: the plan priced its gradient as the rows a step touches;
    ``sparse_sync``: how the plan allreduces it (``VarSync.sparse_sync``).
    """

    name: str
    method: str
    devices: tuple
    axis: int = 0
    algorithm: str = "ring"
    bucket: int = 0
    compression: str = "none"
    sparse: bool = False
    sparse_sync: str = "gather"


@dataclass(frozen=True)
class RunLayout:
    """Replica devices, their nodes, each variable's placement and the prediction.

    ``replica_devices`` holds each replica's first device (where its
    variables live); ``replica_slots`` all of its devices, and
    ``group_slots`` which slot runs each op group (a name scope of the
    captured step) when a replica spans several devices.
    """

    replica_devices: tuple
    replica_nodes: tuple
    variables: dict
    predicted_step_time: float
    plan_name: str = ""
    replica_slots: tuple = ()
    group_slots: dict = field(default_factory=dict)
    batch_size: int = 0  # the global batch the plan was made for (0: not known)
    micro_batches: int = 1  # parts each replica's slice of a step is cut into, their gradients accumulated
    script_batch: int = 0  # the batch the script gives a step, where the plan is for another (0: batch_size)
    per_replica: bool = False  # every replica runs the script's batch (batch_size = replicas x script_batch)
    xla: bool = False  # whether the step was priced compiled by XLA on the plan's devices (autodist.graph.xla)
    xla_reason: str = ""  # why, in the plan's words

    @classmethod
    def from_plan(cls, plan):
        """Resolve a plan's logical devices into TensorFlow device strings."""
        strategy = plan.strategy
        replica_slots = tuple(tuple(plan.device_string(d, job="worker") for d in r) for r in strategy.replicas)
        replica_nodes = tuple(plan.resource_spec.device(r[0]).node for r in strategy.replicas)
        variables = {}
        sparse = {v["name"] for v in plan.variables if v.get("sparse")}
        for name, sync in sorted(strategy.sync.items()):
            variables[name] = VariablePlacement(
                name=name,
                method=sync.method,
                devices=tuple(plan.variable_devices(name)),
                axis=sync.axis,
                algorithm=sync.algorithm,
                bucket=sync.bucket,
                compression=sync.compression,
                sparse=name in sparse,
                sparse_sync=sync.sparse_sync,
            )
        return cls(
            replica_devices=tuple(slots[0] for slots in replica_slots),
            replica_nodes=replica_nodes,
            variables=variables,
            predicted_step_time=float(plan.prediction.get("step_time") or 0.0),
            plan_name=plan.name,
            replica_slots=replica_slots,
            group_slots=dict(strategy.group_slots),
            batch_size=int(plan.graph.get("batch_size") or 0),
            micro_batches=plan.micro_batches,
            xla=bool(plan.graph.get("xla", False)),
            xla_reason=str(plan.graph.get("xla_reason", "")),
            script_batch=int(plan.graph.get("script_batch") or 0),
            per_replica=bool(plan.graph.get("batch_per_replica")),
        )

    def jit_compile(self, device_type):
        """The ``jit_compile`` a replica on ``device_type`` compiles its step with: False where replicas on CPUs sum
        gradients (XLA compiles no CPU collective: "Only compiling NCCL/auto collective is supported, got: ring"),
        else as the plan priced it (autodist.graph.xla.plan_xla prices those CPU replicas without XLA too)."""
        if device_type != "GPU" and len(self.replica_devices) > 1:
            return False
        return self.xla

    @property
    def step_rows(self):
        """The rows each step must be given (0: not known): every replica's batch where each runs the script's, else
        the global batch (which the runtime re-cuts ``model.fit``'s data to)."""
        return (self.script_batch or self.batch_size) if self.per_replica else self.batch_size

    @property
    def rebatched(self):
        """Whether the plan's global batch is not the script's (``--global-batch``): fit's data is re-cut to it."""
        return not self.per_replica and bool(self.script_batch) and self.script_batch != self.batch_size

    def buckets(self):
        """The collectives in issue order: list of (bucket, algorithm, [variable names]), one per
        autodist.strategy.CollectiveKey (the runtime holds every allreduced variable on its replica's first
        device: slot 0)."""
        groups = {}
        for v in self.variables.values():
            if v.method == "allreduce":
                groups.setdefault(CollectiveKey.of(v), []).append(v.name)
        return [(key.bucket, key.algorithm, names) for key, names in sorted(groups.items())]

    def ps_variables(self):
        return [v for v in self.variables.values() if v.method == "ps"]

    def replicas_by_task(self):
        """Replica indices grouped by the task (process) their first device belongs to, in first-seen order."""
        tasks = {}
        for r, device in enumerate(self.replica_devices):
            tasks.setdefault(device.split("/device:")[0], []).append(r)
        return [tuple(members) for members in tasks.values()]
