"""The placement problem: one job on one cluster, with every cost the search needs, built once.

A :class:`Problem` holds what does not depend on the strategy: the trainable
variables and their bytes, the op groups, the devices where PS tasks may
live, and the costs (op seconds per device model, optimizer updates per
variable, live-tensor peaks), each priced on first use and cached.
Transfers and collectives are priced in phases by ``Problem.prices``
(placement.prices), the one route to the CommModel's phases.  The strategy
space, the baselines, the lower bound and the simulator all read it; only
the simulator evaluates strategies.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from autodist.graph.item import GraphItem
from autodist.graph.rebatch import at_batch, replica_batch
from autodist.graph.semantics import replica_limit
from autodist.graph.xla import plan_xla, resolve_xla
from autodist.resource_spec.emulated import machine_cores
from cost_models import gradient_bytes
from cost_models.comm import cast_seconds, wire_bytes
from cost_models.memory import allocated_bytes, live_peak, runtime_overhead_bytes
from cost_models.step_table import fuses_elementwise, step_table
from placement.grouping import group_ops
from placement.prices import PhasePrices

def ps_candidates(resource_spec):
    """Where PS tasks may live: each node's first CPU, else its first device."""
    out = []
    for node in resource_spec.nodes:
        cpus = [d for d in node.devices if d.kind == "CPU"]
        devices = cpus or node.devices
        if devices:
            out.append(devices[0].name)
    return out


def model_key(device):
    """Devices of one key share every op cost."""
    return (device.kind, device.model)


class Problem:
    """One job on one cluster: variables, op groups, devices and costs.

    Parameters
    ----------
    graph_item : autodist.graph.item.GraphItem
    resource_spec : autodist.resource_spec.ResourceSpec
    cost_model : cost_models.CostModel
    groups : placement.grouping.GroupGraph, optional
        Precomputed grouping of ``graph_item``.

    ``graph_item``'s batch is the global batch of a step.  The runtime gives
    each of a strategy's ``R`` replicas its slice of it and, with ``m``
    micro-batches, runs that slice in ``m`` parts; the compute, live tensors
    and touched rows of one part are those of the problem :meth:`at_replicas`
    returns.  ``sharing``: how many replica processes share this machine's
    cores (unpinned ``cpu-local`` CPUs, whose processes all run here); each
    such CPU is priced on its share of the cores.
    """

    def __init__(self, graph_item, resource_spec, cost_model, groups=None, share_of=None, sharing=1):
        self.graph_item = graph_item
        self._whole = share_of or self
        self._shares = {}
        self.resource_spec = resource_spec
        self.cost_model = cost_model
        self.groups = groups if groups is not None else group_ops(graph_item)
        self.comm = share_of.comm if share_of else cost_model.comm_model(resource_spec)
        self.prices = share_of.prices if share_of else PhasePrices(self.comm)
        self.variables = [v for v in graph_item.trainable_variables()]
        self.dense_bytes = {v.name: int(v.bytes) for v in self.variables}
        self.sparse_bytes = {v.name: gradient_bytes(v) for v in self.variables}
        self.sparse_gradients = {v.name for v in self.variables if v.sparse_gradient}
        self.compressed_bytes = {v.name: wire_bytes(v, "fp16") for v in self.variables}
        slot_bytes = {}
        for s in graph_item.slot_variables():
            slot_bytes[s.slot_of] = slot_bytes.get(s.slot_of, 0) + int(s.bytes)
        self.slot_bytes = {v.name: slot_bytes.get(v.name, 0) for v in self.variables}
        self.var_unit = {v.name: self.groups.unit_of_variable(v.name) for v in self.variables}
        gradient_group = self.groups.gradient_group
        self.ready_order = sorted(self.dense_bytes, key=lambda v: (gradient_group[v], v))
        self.ps_candidates = ps_candidates(resource_spec)
        self.node_index = {node.name: i for i, node in enumerate(resource_spec.nodes)}
        self.preds = self.groups.predecessors()
        self.unit_index = {u: i for i, u in enumerate(self.groups.units)}
        self.group_unit = [self.unit_index[g.unit] for g in self.groups.groups]
        self.no_slots = (0,) * len(self.groups.units)
        self.is_gpu = {d.name: d.kind == "GPU" for d in resource_spec.devices()}
        # devices of one key share every op cost: the model, and the cores a CPU process gets (emulated nodes,
        # or this machine's cores shared by its replica processes)
        self.device_model = {d.name: (model_key(d), self._cores(d, sharing)) for d in resource_spec.devices()}
        self.one_core = frozenset(d for d, (_, cores) in self.device_model.items() if cores == 1)
        self.core_pools = {d.name: pool for d in resource_spec.devices("CPU") if (pool := self._core_pool(d))}
        self.memory_bytes = {d.name: d.memory_bytes for d in resource_spec.devices()}
        self.on_this_machine = any(d.model == "cpu-local" and resource_spec.cores_of(d.name) is None
                                   for d in resource_spec.devices("CPU"))
        self.micro_batches = max(int(getattr(graph_item.job, "micro_batches", 1) or 1), 1)
        self.input_bytes = graph_item.input_bytes()  # one (micro-)batch of this problem's step
        self.precision = getattr(graph_item.job, "precision", "") or "fp32"
        # XLA runs elementwise chains fused, and does not store their insides (cost_models.memory)
        self.device_kind = "GPU" if any(self.is_gpu.values()) else "CPU"
        self.xla = resolve_xla(graph_item.job, self.device_kind).on
        self.fused_kernels = fuses_elementwise(self.xla, graph_item.job.framework)
        self._table = None
        self._op_group = None
        self._live = {}
        self._costs = {}
        self._update_attribution = None
        # transfer prices do not depend on the batch: the shares of one problem keep them in one place
        whole = self._whole
        self._slowest_memory = whole._slowest_memory if share_of else {}  # devices -> the lowest memory bandwidth

    def _cores(self, device, sharing):
        """The cores ``device``'s process gets: its emulated node's, this machine's over ``sharing`` processes
        for an unpinned ``cpu-local`` CPU, else None (all of its own)."""
        pinned = self.resource_spec.cores_of(device.name)
        if pinned is not None or sharing == 1 or device.model != "cpu-local":
            return pinned
        return max(1, len(machine_cores()) // sharing)

    def overlaps_compute(self, replicas):
        """Whether a step of ``replicas`` (lists of device names) can allreduce gradients while it computes: not
        where every replica process has one core (an emulated node's, or this machine's shared by that many
        processes).

        Such a process runs one op at a time on its one inter-op thread, and a
        collective's ring steps (or the ops that sum a graph allreduce)
        progress only between its kernels.  Measured by
        benchmarks/bench_emulated.py before this rule (the run after it
        replaced those results): small_cnn on emu-1gbit:2 ran its gradients
        in three buckets, priced to overlap the backward pass, in 45.9 ms,
        and in one after it in 44.4 ms (priced 29.2 and 38.1 ms);
        transformer_lm on emu-1gbit:2 in 440 ms and 456 ms (priced 322 and
        427 ms).  A PS push is one Send op, after which gRPC's own threads
        move the bytes, so pushes and pulls overlap the compute even there
        (placement.simulator): small_cnn's greedy PS on emu-1gbit:2, whose
        dense layer's 1.2 MB gradient is ready first in the backward pass and
        whose weights are read last in the forward, ran in 31.8 and 31.9 ms
        in two runs of that benchmark, priced 41.3 and 41.5 ms where neither
        overlapped.
        """
        return not self.one_core or not all(d in self.one_core for replica in replicas for d in replica)

    def at_replicas(self, replicas, micro_batches=None, one_client=False):
        """The problem of one micro-batch of one replica's share of the global batch (cached).

        Its step is re-scaled to ``autodist.graph.rebatch.replica_batch``
        samples (``replicas`` replicas, ``micro_batches`` parts, by default the
        job's), and where the replicas are processes on this machine's
        unpinned CPUs they share its cores.  A job XLA would compile is priced
        without it where the plan's step runs uncompiled (autodist.graph.xla.plan_xla):
        ``one_client`` (the plan is driven by one client), or several replicas on
        CPUs (they sum gradients with collectives XLA does not compile there).  It shares this
        problem's grouping and cost model, and is this problem itself where the
        part is the whole captured batch on unshared cores, as the job runs.
        """
        whole = self._whole
        batch = replica_batch(whole.graph_item.job.batch_size, replicas, micro_batches or whole.micro_batches)
        sharing = replicas if whole.on_this_machine else 1
        uncompiled = whole.xla and not plan_xla(whole.graph_item.job, whole.device_kind, one_client, replicas).on
        if batch == whole.graph_item.job.batch_size and sharing == 1 and not uncompiled:
            return whole
        key = (batch, sharing, uncompiled)
        if key not in whole._shares:
            item = at_batch(whole.graph_item, batch)
            if uncompiled:
                item = GraphItem(list(item.ops.values()), list(item.variables.values()),
                                 replace(item.job, jit_compile="off"), item.loops.values())
            whole._shares[key] = Problem(item, whole.resource_spec, whole.cost_model, groups=whole.groups,
                                         share_of=whole, sharing=sharing)
        return whole._shares[key]

    @property
    def max_replicas(self):
        """The most one-device replicas a plan of this job can run (autodist.graph.semantics.replica_limit)."""
        whole = self._whole  # a share's graph is one replica's slice
        job = whole.graph_item.job
        return replica_limit(job.batch_size, whole.micro_batches, len(whole.resource_spec.compute_devices()),
                             job.batch_per_replica)

    def micro_batches_of(self, strategy):
        """The micro-batches one step of ``strategy`` runs: its own count, else the job's."""
        return strategy.micro_batches or self.micro_batches

    # -- compute and update costs ------------------------------------------
    def device_costs(self, device):
        """(group seconds list, update seconds per variable) on ``device``'s model."""
        key = self.device_model[device.name]
        if key not in self._costs:
            op_costs = self.cost_model.op_costs(self.graph_item, device, cores=key[1])
            seconds = {name: c.step_seconds for name, c in op_costs.items()}
            group_seconds = [sum(seconds.get(o, 0.0) for o in g.ops) for g in self.groups.groups]
            self._costs[key] = (group_seconds, self._update_costs(seconds))
        return self._costs[key]

    def _update_costs(self, seconds):
        own, rest = self._whole._update_ops()
        rest = sum(seconds.get(o, 0.0) for o in rest)
        total = sum(self.dense_bytes.values()) or 1
        return {name: sum(seconds.get(o, 0.0) for o in ops) + rest * self.dense_bytes[name] / total
                for name, ops in own.items()}

    def _update_ops(self):
        """``(variable -> its own and its slots' update ops, sorted; the update ops of no variable)``, found once
        (the shares of one problem have its variables and groups)."""
        if self._update_attribution is None:
            variables = self.graph_item.variables
            update_ops = set(self.groups.update_ops)
            own = {}
            for v in self.variables:
                names = set(v.update_ops)
                for slot in v.slots:
                    if slot in variables:
                        names.update(variables[slot].update_ops)
                own[v.name] = sorted(names & update_ops)
            attributed = {o for ops in own.values() for o in ops}
            self._update_attribution = (own, [o for o in self.groups.update_ops if o not in attributed])
        return self._update_attribution

    def gathered(self, strategy, names):
        """The sparse gradients among ``names`` whose rows ``strategy`` all-gathers (``VarSync.sparse_sync``)."""
        if not self.sparse_gradients:
            return ()
        return tuple(v for v in names if v in self.sparse_gradients and strategy.sync[v].sparse_sync == "gather")

    def gathered_update_seconds(self, device, name):
        """Sparse variable ``name``'s update on ``device`` once every replica's rows are gathered (or pushed to its
        PS): the same kernels as one replica's, over the rows of the whole batch (the captured step's own update)."""
        return self._whole.device_costs(self.resource_spec.device(device))[1][name]

    def dense_update_seconds(self, device, name):
        """A sparse gradient densified and applied as a dense one on ``device``: the table's zeros written and
        the rows scattered into them, then the update streams the variable, its gradient and its slots in and
        the variable and slots out; memory-bound at the device's bandwidth."""
        table, slots = self.dense_bytes[name], self.slot_bytes[name]
        streamed = 2 * table + (2 * table + slots) + (table + slots)
        return streamed / self.resource_spec.device(device).memory_bandwidth

    def cast_seconds(self, devices, dense_bytes, wire):
        """One way of a compressed bucket's cast on the slowest of ``devices`` (0 when nothing is cast)."""
        if wire == dense_bytes:
            return 0.0
        if devices not in self._slowest_memory:
            self._slowest_memory[devices] = min(self.resource_spec.device(d).memory_bandwidth for d in devices)
        return cast_seconds(dense_bytes, wire, self._slowest_memory[devices])

    def client_time(self, strategy, collective_ops=None):
        """The fixed cost per step of the loop that drives it.  A plan on collective ops runs the script's own
        loop in every replica (Keras' fit loop, or the script's loop calling its step function): on a CPU the
        loop and the ops take turns on the same cores, while on a GPU the loop runs ahead of the kernels it has
        launched, hidden behind them (0 here).  Another plan is driven by one client
        (launcher.runtime.trainer), which dispatches the step to every worker and PS task.  ``collective_ops``:
        ``strategy.allreduces_everything()``, where the caller knows it."""
        if strategy.allreduces_everything() if collective_ops is None else collective_ops:
            on_gpus = any(self.is_gpu[r[0]] for r in strategy.replicas)
            return 0.0 if on_gpus else self.comm.replica_loop_seconds(self.graph_item.job.step)
        return self.comm.client_step_seconds(len(self.remote_tasks(strategy)))

    def remote_tasks(self, strategy):
        """A device of every task a one-client plan runs: a worker per node of its replicas (its first replica
        device there), a PS per PS device."""
        spec, workers = self.resource_spec, {}
        for replica in strategy.replicas:
            for d in replica:
                workers.setdefault(spec.device(d).node, d)
        return list(workers.values()) + list(dict.fromkeys(strategy.ps_devices))

    def core_pool(self, device):
        """``(pool, cores)``: the cores that ``device``'s processes share with the other processes there (an
        emulated node's, or this machine's for a ``cpu-local`` CPU), None where they have cores of their own."""
        return self.core_pools.get(device)

    def _core_pool(self, device):
        cores = self.resource_spec.cores_of(device.name)
        if cores is not None:
            return device.node, cores
        return ("this machine", len(machine_cores())) if device.model == "cpu-local" else None

    # -- transfer costs ----------------------------------------------------
    def grpc_cpu(self, messages):
        """What gRPC ``messages`` (``(src device, dst device, bytes, count)``) cost the processes at their ends
        in CPU seconds, per pool of shared cores (:meth:`core_pool`): ``{pool: seconds}``.  Elsewhere the ends'
        CPU is not the step's binding resource and is not counted."""
        cpu = {}
        if not self.core_pools:
            return cpu
        for src, dst, nbytes, count in messages:
            seconds = count * self.comm.endpoint_cpu_seconds(nbytes)
            for end in (src, dst):
                pool = self.core_pool(end)
                if pool is not None:
                    cpu[pool] = cpu.get(pool, 0.0) + seconds
        return cpu

    # -- memory costs ------------------------------------------------------
    def allocated_bytes(self):
        """Bytes the ops of each group allocate in all (an upper bound of their live peak), and those of the updates."""
        self.step_table()
        nbytes = allocated_bytes(self._table, self.precision, self.fused_kernels)
        per_group = np.bincount(self._op_group[self._op_group >= 0], weights=nbytes[self._op_group >= 0],
                                minlength=len(self.groups.groups))
        return [int(b) for b in per_group], int(nbytes[self._op_group < 0].sum())

    def step_table(self):
        """The step table of the job (cost_models.step_table), built once."""
        if self._table is None:
            self._table = step_table(self.graph_item)
            group_of = {op: g for g, group in enumerate(self.groups.groups) for op in group.ops}
            self._op_group = np.array([group_of.get(op, -1) for op in self.graph_item.ops])
        return self._table

    def runtime_reserve(self, device):
        """Bytes of ``device`` that the runtime holds besides the step's tensors (0 on a CPU)."""
        return runtime_overhead_bytes(self.step_table()) if device.kind == "GPU" else 0

    def slot_peak(self, slots, slot):
        """``(live tensor peak, GPU runtime reserve)`` of the device at ``slot`` of a replica whose units sit on
        ``slots`` (cached)."""
        key = (slots, slot)
        if key not in self._live:
            self.step_table()
            # Update ops (no group: index -1, the last entry) are counted on slot 0's device.
            on_slot = np.array([slots[u] == slot for u in self.group_unit] + [slot == 0])[self._op_group]
            self._live[key] = (live_peak(self._table, self.precision, on_slot, self.fused_kernels),
                               runtime_overhead_bytes(self._table, on_slot))
        return self._live[key]
