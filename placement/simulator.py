"""Event-driven simulation of one training step under a Strategy.

What one step does, as simulated:

1. **Compute.**  Each replica runs its op groups (``placement.grouping``) in
   dependency order; a device runs the groups that are ready on it in the
   order they became ready (ties by topological index).  A tensor crossing
   devices inside a replica costs its ``CommModel.transfer_phases``, queued
   on that replica's links.
2. **Synchronisation.**  A variable's gradient is ready when its gradient
   group ends; its sync starts then, so it overlaps the rest of the backward
   pass.  Allreduce: the gradients of one fusion bucket go as one collective
   once the bucket's last gradient is ready, on collective ops (NCCL) when
   the plan allreduces everything, else summed by the runtime's ordinary
   ops over gRPC (``CommModel.graph_allreduce_phases``).  The collective
   ops of one group of devices run one at a time, on one stream, in the order
   they are issued: each, its fixed latency included, starts once the one
   before it ended, so many small buckets pay their fixed costs one after
   another and can outlast the backward pass they overlap.  PS, as the
   runtime runs it: every worker task (one per node) sums its replicas'
   gradient of each shard on its first replica device and pushes it once
   over gRPC, the PS applies the update when all pushes of that shard are
   in, then every task pulls it once and copies it to its other replicas.
   Transfers are taken in request order, and every phase of one runs in
   the first window, once it is ready, in which every link resource it
   occupies (one per direction of each port: links are full duplex) is
   free, possibly a gap that earlier reservations left; this models
   contention on NVLink/PCIe ports, NICs and PS servers.
3. **Updates.**  After an allreduce, each replica device applies the
   optimizer update of the bucket's variables (after its own compute);
   a PS applies its shards' updates one at a time.

The step ends when the last compute, update or pull ends.

Costs: op seconds come from ``cost_model.op_costs`` (once per device model):
each op's share of a one-device step (``OpCost.step_seconds``), so that a
CPU device whose executor overlaps ops (cost_models.executor) runs its
groups in the overlapped step's time (a replica split over several such
devices uses the shares of the one-device schedule: an approximation); on a
GPU a share is the op's time.
Optimizer-update ops are charged to their variable (its own and its slots'
update ops) plus a byte-proportional share of unattributed update ops.

Gradient accumulation: a job of ``m`` micro-batches (``JobInfo.micro_batches``)
runs its forward and backward ``m`` times, one after another, then
synchronises and updates once; gradients become ready during the last
micro-batch.

Memory (:meth:`Simulator.memory`): parameters and optimizer slots where they
live, plus the peak of the live tensors of the ops each device runs
(cost_models.memory: outputs held until their last reader), with
accumulation a gradient buffer, and on a GPU the framework reserve and
cuDNN's workspace.

Incremental evaluation: replicas whose devices have the same model and whose
groups sit on the same slots have identical compute schedules, so a schedule
is computed once per *replica class* and cached, keyed by the device models
(one-device replicas) or the devices and group slots (model parallel).  A
move that changes only synchronisation (method, shard, partition, algorithm,
bucket, PS count) hits that cache and re-simulates only the communication,
whose cost is a few events per variable and node.  The local sum of a
task's ``k`` replicas is one transfer that occupies the links as long as
``k - 1`` copies into the first replica device one after another (they all
arrive on its port, so the queue would serialise them anyway), and likewise
the copies out after the pull.

A phase occupies its links for its duration less TensorFlow's per-tensor
overhead (``CommModel.per_tensor_overhead``), which is spent at the
endpoints before the bytes move: concurrent RPCs of different workers pay
it in parallel, so it delays a transfer without holding the link.
Phase lists from the CommModel are cached too.  ``tests/test_simulator*``
checks that the cached result equals a fresh simulation.
"""

from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field

import numpy as np

from cost_models import Phase, gradient_bytes
from cost_models.memory import allocated_bytes, live_peak, runtime_overhead_bytes
from cost_models.step_table import step_table
from autodist.graph.rebatch import at_batch, replica_batch
from placement.grouping import group_ops

# Work units charged per simulate() call besides its events: the fixed
# bookkeeping (buckets, memory) costs about as much as this many events.
PER_SIMULATION_WORK = 20
# Work units charged when a transfer or collective is first priced by the
# CommModel (a path lookup costs about as much as this many events).
MISS_WORK = 10
_PROBE_BYTES = 1 << 30
_CHECK_BYTES = 12_345_679


@dataclass
class SimResult:
    """The simulated step.

    ``step_time``: seconds from the step's start to its last event;
    ``compute_time``: when the slowest replica finishes forward and backward;
    ``exposed_comm_time``: ``step_time - compute_time - client_time`` (sync
    and updates not hidden behind compute); ``client_time``: the fixed cost of
    a step one client drives on remote tasks (0 for plans on collective ops,
    where every worker runs its own step); ``link_busy`` / ``device_busy``: seconds each
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

    def to_chrome_trace(self):
        """The timeline in Chrome trace format (``chrome://tracing``, Perfetto)."""
        resources = sorted({e[2] for e in self.events})
        tid = {r: i for i, r in enumerate(resources)}
        trace = [
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": tid[r], "args": {"name": r}} for r in resources
        ]
        for name, category, resource, start, end in self.events:
            trace.append(
                {
                    "name": name,
                    "cat": category,
                    "ph": "X",
                    "pid": 0,
                    "tid": tid[resource],
                    "ts": start * 1e6,
                    "dur": (end - start) * 1e6,
                }
            )
        return {"traceEvents": trace, "displayTimeUnit": "ms"}


@dataclass
class _Schedule:
    """The compute schedule of one replica class (slot-indexed)."""

    end: float
    slot_end: dict
    slot_busy: dict
    gradient_ready: dict
    events: list


class _LinkQueue:
    """Occupation of link resources by phases, each at the earliest time all its links are free.

    Every link keeps its busy intervals; a phase takes the first window of
    its length, at or after it is ready, that is free on all of its links,
    so it may use a gap that an earlier reservation left (a transfer waiting
    for a busy receiver does not hold the sender's link idle meanwhile).
    Adjacent intervals are merged, which keeps a saturated link's list short.
    """

    def __init__(self):
        self.intervals = {}  # link -> ([starts], [ends]), sorted, disjoint
        self.busy = {}

    def occupy(self, links, ready, seconds):
        start = ready
        moved = True
        while moved:
            moved = False
            for link in links:
                starts, ends = self.intervals.get(link, ((), ()))
                i = bisect.bisect_right(ends, start)  # the first interval ending after start
                if i < len(starts) and starts[i] < start + seconds and ends[i] > start:
                    start, moved = ends[i], True
        end = start + seconds
        for link in links:
            if end > start:
                self._insert(link, start, end)
            self.busy[link] = self.busy.get(link, 0.0) + seconds
        return start, end

    def _insert(self, link, start, end):
        starts, ends = self.intervals.setdefault(link, ([], []))
        i = bisect.bisect_left(starts, start)
        if i > 0 and ends[i - 1] >= start:  # joins the interval before
            i -= 1
            start = starts[i]
            del starts[i], ends[i]
        while i < len(starts) and starts[i] <= end:  # and the ones it reaches
            end = max(end, ends[i])
            del starts[i], ends[i]
        starts.insert(i, start)
        ends.insert(i, end)


class _SyncRun:
    """One step's synchronisation: transfers queued on links, updates on devices.

    ``classes`` are ``(schedule, replicas)`` pairs of identical replicas.
    Transfers wait in a heap ordered by request time; ``drain`` runs them.
    """

    def __init__(self, sim, strategy, classes, trace, overlap):
        self.sim = sim
        self.strategy = strategy
        self.classes = classes
        self.trace = trace
        self.overlap = overlap
        self.links = _LinkQueue()
        self.events = []
        self.finish = [max(schedule.end for schedule, _ in classes)]
        self.upd_free = {(c, slot): t for c, (sch, _) in enumerate(classes) for slot, t in sch.slot_end.items()}
        self.upd_busy = {}
        self.ps_free = {}
        self.busy = {}
        self.worker_groups = {}
        self.heap = []
        self.seq = 0
        self.stream_free = {}  # devices of a collective group -> when its stream is next free

    def ready(self, schedule, var):
        return schedule.gradient_ready[var] if self.overlap else schedule.end

    def submit(self, t, phases, label, on_done, stream=None):
        """Queue ``phases`` from ``t``; a collective names its ``stream`` (its devices) and runs atomically."""
        if not phases:
            on_done(t)
            return
        heapq.heappush(self.heap, (t, self.seq, 0, phases, label, on_done, stream))
        self.seq += 1

    def drain(self):
        """Run every queued transfer; a collective runs its phases back to back, on its group's one
        stream in the order the collectives are issued (each starts, latency included, once the one
        before it ended); separate transfers queue phase by phase."""
        heap, links, sim = self.heap, self.links, self.sim
        while heap:
            t, _, index, phases, label, on_done, stream = heapq.heappop(heap)
            atomic = stream is not None
            last = len(phases) if atomic else index + 1
            end = max(t, self.stream_free.get(stream, t)) if atomic else t
            for latency, occupancy, used in phases[index:last]:
                start, end = links.occupy(used, end + latency, occupancy)
                sim._whole.work += 1
                if self.trace:
                    self.events.append((label, "sync", "+".join(used) or "local", start, end))
            if last < len(phases):
                heapq.heappush(heap, (end, self.seq, last, phases, label, on_done, stream))
                self.seq += 1
            else:
                if atomic:
                    self.stream_free[stream] = end
                on_done(end)

    # -- allreduce ---------------------------------------------------------
    def allreduce(self, algorithm, bucket, slot, names, devices):
        """One fused collective once the bucket's last gradient is ready, then the updates."""
        sim = self.sim
        nbytes = sum(sim.dense_bytes[v] for v in names)
        ready = max(self.ready(schedule, v) for schedule, _ in self.classes for v in names)
        collective_ops = self.strategy.allreduces_everything()
        phases = sim._phase_list(
            ("ar", devices, algorithm, nbytes, collective_ops),
            lambda: sim.allreduce_phases(devices, algorithm, nbytes, collective_ops),
        )
        self.submit(
            ready,
            phases,
            f"allreduce {algorithm} bucket {bucket}",
            lambda t: self._apply(t, names, slot, f"update bucket {bucket}"),
            # NCCL runs a group's collectives on one stream; ordinary ops summing separate buckets do not wait
            # for each other.
            stream=devices if collective_ops else (devices, bucket),
        )

    def _apply(self, t, names, slot, label):
        for c, (_, members) in enumerate(self.classes):
            costs = self.sim.device_costs(self.sim.resource_spec.device(members[0][slot]))[1]
            start = max(t, self.upd_free[(c, slot)])
            stop = start + sum(costs[v] for v in names)
            self.upd_free[(c, slot)] = stop
            self.upd_busy[(c, slot)] = self.upd_busy.get((c, slot), 0.0) + stop - start
            self.finish.append(stop)
            if self.trace:
                self.events.append((label, "update", members[0][slot], start, stop))

    # -- parameter servers -------------------------------------------------
    def _workers(self, c, slot):
        """Class ``c``'s devices at ``slot``, per worker task (one per node): a tuple each, in node order."""
        if (c, slot) not in self.worker_groups:
            spec = self.sim.resource_spec
            by_node = {}
            for r in self.classes[c][1]:
                by_node.setdefault(spec.device(r[slot]).node, []).append(r[slot])
            self.worker_groups[(c, slot)] = [tuple(devs) for _, devs in sorted(by_node.items())]
        return self.worker_groups[(c, slot)]

    def parameter_server(self, name, slot):
        """Every task sums its replicas' gradient of each shard and pushes it once; the PS updates
        the shard; every task pulls it once and copies it to its other replicas."""
        s = self.strategy.sync[name]
        nbytes = -(-self.sim.sparse_bytes[name] // s.shards)
        # A sparse gradient (IndexedSlices) is summed by concatenating the replicas' rows.
        sparse = name in self.sim.sparse_gradients
        targets = [(c, devs) for c in range(len(self.classes)) for devs in self._workers(c, slot)]
        for i, task in enumerate(s.ps_tasks):
            ps_device = self.strategy.ps_devices[task]
            label = f"{name}/{i}"
            pushed = self._after_pushes(len(targets), name, label, ps_device, s.shards, nbytes, targets)
            for c, devs in targets:
                pushed_bytes = nbytes * len(devs) if sparse else nbytes
                phases = (self._local_copies(devs, nbytes, inward=True)
                          + self._ps_transfer(devs[0], ps_device, pushed_bytes))
                self.submit(self.ready(self.classes[c][0], name), phases, f"push {label}", pushed)

    def _ps_transfer(self, src, dst, nbytes):
        sim = self.sim
        return sim._phase_list(("ps", src, dst, nbytes), lambda: sim.comm.ps_phases(src, dst, nbytes))

    def _local_copies(self, devs, nbytes, inward):
        """A task's ``nbytes`` from each of its other replica devices into its first one (``inward``), or back out."""
        if len(devs) < 2:
            return []
        sim, hub, other = self.sim, devs[0], devs[1]
        src, dst = (other, hub) if inward else (hub, other)
        copies = len(devs) - 1
        return sim._phase_list(("local", src, dst, nbytes, copies),
                               lambda: sim.comm.transfer_phases(src, dst, nbytes), copies)

    def _after_pushes(self, pending, name, label, ps_device, shards, nbytes, targets):
        """The callback that, at the last push of a shard, updates it and starts the pulls."""
        left = [pending]

        def pushed(t):
            left[0] -= 1
            if left[0]:
                return
            cost = self.sim.device_costs(self.sim.resource_spec.device(ps_device))[1][name] / shards
            start = max(t, self.ps_free.get(ps_device, 0.0))
            stop = start + cost
            self.ps_free[ps_device] = stop
            self.busy[ps_device] = self.busy.get(ps_device, 0.0) + cost
            if self.trace:
                self.events.append((f"update {label}", "update", ps_device, start, stop))
            for _, devs in targets:
                phases = self._ps_transfer(ps_device, devs[0], nbytes) + self._local_copies(devs, nbytes, inward=False)
                self.submit(stop, phases, f"pull {label}", self.finish.append)

        return pushed


class Simulator:
    """Simulates strategies of one job on one cluster, caching what it can.

    Parameters
    ----------
    graph_item : autodist.graph.item.GraphItem
    resource_spec : autodist.resource_spec.ResourceSpec
    cost_model : cost_models.CostModel
    groups : placement.grouping.GroupGraph, optional
        Precomputed grouping of ``graph_item``.

    ``graph_item``'s batch is the global batch of a step.  The runtime gives
    each of a strategy's ``R`` replicas its slice of it (and, with ``m``
    micro-batches, runs that slice in ``m`` parts), so a strategy is priced
    by the simulator of its replica count (:meth:`at_replicas`), whose step
    is the largest slice.
    """

    def __init__(self, graph_item, resource_spec, cost_model, groups=None, share_of=None):
        self.graph_item = graph_item
        self._whole = share_of or self
        self._shares = {}
        self.resource_spec = resource_spec
        self.cost_model = cost_model
        self.groups = groups if groups is not None else group_ops(graph_item)
        self.comm = cost_model.comm_model(resource_spec)
        self.overhead = float(getattr(self.comm, "per_tensor_overhead", 0.0))
        self.variables = [v for v in graph_item.trainable_variables()]
        self.dense_bytes = {v.name: int(v.bytes) for v in self.variables}
        self.sparse_bytes = {v.name: gradient_bytes(v) for v in self.variables}
        self.sparse_gradients = {v.name for v in self.variables if v.sparse_gradient}
        slot_bytes = {}
        for s in graph_item.slot_variables():
            slot_bytes[s.slot_of] = slot_bytes.get(s.slot_of, 0) + int(s.bytes)
        self.slot_bytes = {v.name: slot_bytes.get(v.name, 0) for v in self.variables}
        self.var_unit = {v.name: self.groups.unit_of_variable(v.name) for v in self.variables}
        self._preds = self.groups.predecessors()
        self._unit_index = {u: i for i, u in enumerate(self.groups.units)}
        self._group_unit = [self._unit_index[g.unit] for g in self.groups.groups]
        self.micro_batches = max(int(getattr(graph_item.job, "micro_batches", 1) or 1), 1)
        self.precision = getattr(graph_item.job, "precision", "") or "fp32"
        self._table = None
        self._op_group = None
        self._live = {}
        self._costs = {}
        self._schedules = {}
        self._phases = {}
        self._affine = {}
        self.work = 0  # events processed so far: a machine-independent effort count

    def at_replicas(self, replicas):
        """The simulator of one replica's share of the global batch over ``replicas`` replicas (cached).

        It prices the step at ``autodist.graph.rebatch.replica_batch`` samples
        and shares this simulator's grouping and cost model; it is this
        simulator itself where the share is the whole captured batch.
        """
        whole = self._whole
        batch = replica_batch(whole.graph_item.job.batch_size, replicas, whole.micro_batches)
        if batch == whole.graph_item.job.batch_size:
            return whole
        if batch not in whole._shares:
            whole._shares[batch] = Simulator(at_batch(whole.graph_item, batch), whole.resource_spec,
                                             whole.cost_model, groups=whole.groups, share_of=whole)
        return whole._shares[batch]

    # -- costs -----------------------------------------------------------
    @staticmethod
    def _model_key(device):
        return (device.kind, device.model)

    def device_costs(self, device):
        """(group seconds list, update seconds per variable) on ``device``'s model."""
        key = self._model_key(device)
        if key not in self._costs:
            op_costs = self.cost_model.op_costs(self.graph_item, device)
            seconds = {name: c.step_seconds for name, c in op_costs.items()}
            group_seconds = [sum(seconds.get(o, 0.0) for o in g.ops) for g in self.groups.groups]
            self._costs[key] = (group_seconds, self._update_costs(seconds))
        return self._costs[key]

    def _update_costs(self, seconds):
        variables = self.graph_item.variables
        own = {}
        attributed = set()
        for v in self.variables:
            names = set(v.update_ops)
            for slot in v.slots:
                if slot in variables:
                    names.update(variables[slot].update_ops)
            names &= set(self.groups.update_ops)
            attributed |= names
            own[v.name] = sum(seconds.get(o, 0.0) for o in sorted(names))
        rest = sum(seconds.get(o, 0.0) for o in self.groups.update_ops if o not in attributed)
        total = sum(self.dense_bytes.values()) or 1
        return {name: own[name] + rest * self.dense_bytes[name] / total for name in own}

    def _phase_list(self, key, make, count=1):
        """Cached ``(latency, occupancy, links)`` stages of the phases ``make()`` returns.

        The CommModel's per-tensor overhead (TensorFlow's fixed software
        cost per tensor, at the endpoints) is taken out of the first phase
        as latency that occupies no link; ``count`` identical transfers
        issued together pay it once and occupy the links back to back.
        """
        stages = self._phases.get(key)
        if stages is None:
            self._whole.work += MISS_WORK
            stages = []
            for i, phase in enumerate(make()):
                latency = min(self.overhead, phase.seconds) if i == 0 else 0.0
                stages.append((latency, (phase.seconds - latency) * count, phase.links))
            self._phases[key] = stages
        return stages

    def allreduce_phases(self, devices, algorithm, nbytes, collective_ops=False):
        """One allreduce as the runtime runs it, from a per-(devices, algorithm) affine fit when exact.

        ``collective_ops``: on collective ops (``CommModel.allreduce_phases``),
        else summed by ordinary ops over gRPC (``CommModel.graph_allreduce_phases``).
        The CommModel's phases are latency plus bytes over
        bandwidth, so two probes give each phase's intercept and slope and a
        new fusion-bucket size costs no walk over the devices.  A third probe
        checks the fit; where it fails (e.g. unequal nodes, whose slowest
        node changes with size), every size is asked of the CommModel.
        """
        key = (devices, algorithm, collective_ops)
        if key not in self._affine:
            self._affine[key] = self._affine_fit(list(devices), algorithm, collective_ops)
        fit = self._affine[key]
        if fit is None:
            return self._priced_allreduce(nbytes, list(devices), algorithm, collective_ops)
        return [Phase(a + b * nbytes, links) for a, b, links in fit]

    def _priced_allreduce(self, nbytes, devices, algorithm, collective_ops):
        if collective_ops:
            return self.comm.allreduce_phases(nbytes, devices, algorithm, collective_ops=True)
        return self.comm.graph_allreduce_phases(nbytes, devices, algorithm)

    def _affine_fit(self, devices, algorithm, collective_ops):
        zero, probe, check = (self._priced_allreduce(n, devices, algorithm, collective_ops)
                              for n in (0, _PROBE_BYTES, _CHECK_BYTES))
        if not [p.links for p in zero] == [p.links for p in probe] == [p.links for p in check]:
            return None
        fit = [(z.seconds, (p.seconds - z.seconds) / _PROBE_BYTES, z.links) for z, p in zip(zero, probe)]
        for (a, b, _), c in zip(fit, check):
            if abs(a + b * _CHECK_BYTES - c.seconds) > 1e-9 * max(c.seconds, 1e-9):
                return None
        return fit

    # -- compute ---------------------------------------------------------
    def _schedule(self, replica, slots, trace):
        devices = [self.resource_spec.device(d) for d in replica]
        if len(replica) == 1:
            key = (self._model_key(devices[0]),)
        else:
            key = (tuple(replica), slots)
        cached = self._schedules.get(key)
        if cached is not None and (cached.events or not trace):
            return cached
        schedule = self._run_compute(replica, devices, slots, trace)
        self._schedules[key] = schedule
        return schedule

    def _run_compute(self, replica, devices, slots, trace):
        groups = self.groups.groups
        n = len(groups)
        costs = [self.device_costs(d)[0] for d in devices]
        slot_of = [slots[self._group_unit[g]] if len(replica) > 1 else 0 for g in range(n)]
        remaining = [len(p) for p in self._preds]
        succs = self.groups.successors()
        ready_at = [0.0] * n
        end = [0.0] * n
        free = {}
        busy = {}
        links = _LinkQueue()
        events = []
        heap = [(0.0, g) for g in range(n) if remaining[g] == 0]
        heapq.heapify(heap)
        while heap:
            ready, g = heapq.heappop(heap)
            slot = slot_of[g]
            start = max(ready, free.get(slot, 0.0))
            finish = start + costs[slot][g]
            free[slot] = finish
            busy[slot] = busy.get(slot, 0.0) + costs[slot][g]
            end[g] = finish
            if trace:
                events.append((groups[g].name, "compute", replica[slot], start, finish))
            for h, nbytes in succs[g]:
                arrive = finish
                if slot_of[h] != slot:
                    src, dst = replica[slot], replica[slot_of[h]]
                    phases = self._phase_list(("xfer", src, dst, nbytes), lambda: self.comm.transfer_phases(src, dst, nbytes))
                    for latency, occupancy, used in phases:
                        t0, arrive = links.occupy(used, arrive + latency, occupancy)
                        if trace:
                            events.append((f"{groups[g].name}->{groups[h].name}", "activation", "+".join(used), t0, arrive))
                if arrive > ready_at[h]:
                    ready_at[h] = arrive
                remaining[h] -= 1
                if remaining[h] == 0:
                    heapq.heappush(heap, (ready_at[h], h))
        self._whole.work += n
        one = max(end, default=0.0)
        earlier = (self.micro_batches - 1) * one  # the micro-batches before the last one
        gradient_ready = {v: earlier + end[g] for v, g in self.groups.gradient_group.items()}
        if earlier:
            free = {slot: earlier + t for slot, t in free.items()}
            busy = {slot: t * self.micro_batches for slot, t in busy.items()}
            events = [(name, kind, where, earlier + a, earlier + b) for name, kind, where, a, b in events]
            events += [(f"micro-batches 1-{self.micro_batches - 1}", "compute", d, 0.0, earlier) for d in replica]
        return _Schedule(earlier + one, free, busy, gradient_ready, events)

    # -- one step ----------------------------------------------------------
    def simulate(self, strategy, trace=False, overlap=True):
        """Simulate one step of ``strategy``.

        Parameters
        ----------
        strategy : autodist.strategy.Strategy
        trace : bool
            Keep the timeline events (for ``SimResult.to_chrome_trace``).
        overlap : bool
            If False, synchronisation waits for the end of compute (a what-if
            that shows how much overlap gains).

        Returns
        -------
        SimResult
        """
        share = self.at_replicas(len(strategy.replicas))
        if share is not self:
            return share.simulate(strategy, trace, overlap)
        spec = self.resource_spec
        self._whole.work += PER_SIMULATION_WORK + len(strategy.sync) + len(strategy.replicas)
        slots = tuple(strategy.group_slots.get(u, 0) for u in self.groups.units)
        classes = {}
        for replica in strategy.replicas:
            schedule = self._schedule(list(replica), slots, trace)
            classes.setdefault(id(schedule), (schedule, []))[1].append(list(replica))
        classes = list(classes.values())
        var_slot = {v: strategy.group_slots.get(self.var_unit[v], 0) for v in self.dense_bytes}
        run = _SyncRun(self, strategy, classes, trace, overlap)

        buckets = {}  # (algorithm, bucket, slot) -> variables
        ps_vars = []
        for name in sorted(strategy.sync):
            s = strategy.sync[name]
            if s.method == "allreduce":
                buckets.setdefault((s.algorithm, s.bucket, var_slot[name]), []).append(name)
            else:
                ps_vars.append(name)
        slot_devices = {}
        for (algorithm, bucket, slot), names in sorted(buckets.items()):
            if slot not in slot_devices:
                slot_devices[slot] = tuple(r[slot] for r in strategy.replicas)
            run.allreduce(algorithm, bucket, slot, names, slot_devices[slot])
        for name in ps_vars:
            run.parameter_server(name, var_slot[name])
        run.drain()

        compute_time = run.finish[0]
        client_time = self.client_time(strategy)
        step_time = client_time + max(max(run.finish), max(run.upd_free.values(), default=0.0),
                                      max(run.ps_free.values(), default=0.0))
        busy = run.busy
        for c, (schedule, members) in enumerate(classes):
            for slot, seconds in schedule.slot_busy.items():
                seconds += run.upd_busy.get((c, slot), 0.0)
                for r in members:
                    busy[r[slot]] = busy.get(r[slot], 0.0) + seconds
        memory = self.memory(strategy, slots)
        events = run.events
        if trace:
            for schedule, _ in classes:
                events.extend(schedule.events)
            if client_time:  # the client dispatches the step before any of it runs
                events = [(n, c, r, start + client_time, end + client_time) for n, c, r, start, end in events]
                events.append(("dispatch the step to every task", "client", "client", 0.0, client_time))
        return SimResult(
            step_time=step_time,
            compute_time=compute_time,
            exposed_comm_time=max(0.0, step_time - compute_time - client_time),
            link_busy=run.links.busy,
            device_busy=busy,
            memory=memory,
            memory_limit={d: spec.device(d).memory_bytes for d in memory},
            events=sorted(events, key=lambda e: (e[3], e[2], e[0])) if trace else [],
            replicas=len(strategy.replicas),
            client_time=client_time,
        )

    def client_time(self, strategy):
        """The fixed cost per step of a plan that one client drives (launcher.runtime.trainer): the client
        dispatches the step to every worker and PS task.  Plans on collective ops have no such client."""
        if strategy.allreduces_everything():
            return 0.0
        spec = self.resource_spec
        tasks = {("worker", spec.device(d).node) for replica in strategy.replicas for d in replica}
        tasks |= {("ps", d) for d in strategy.ps_devices}
        return self.comm.client_step_seconds(len(tasks))

    # -- memory ------------------------------------------------------------
    def memory(self, strategy, slots=None):
        """Peak bytes per device (see cost_models.memory).

        A replica device holds, for allreduce variables of its groups, the
        variable and its optimizer slots (and an accumulation buffer when
        the job accumulates micro-batches); for PS variables, its local copy
        of what it reads; and the peak of the live tensors of the ops of its
        groups (gradients included, until their update).  A PS device holds
        its shards of the variables and of their slots.
        """
        share = self.at_replicas(len(strategy.replicas))
        if share is not self:
            return share.memory(strategy, slots)
        if slots is None:
            slots = tuple(strategy.group_slots.get(u, 0) for u in self.groups.units)
        persistent, accumulated, ps_bytes = {}, {}, {}
        for name, s in strategy.sync.items():
            slot = strategy.group_slots.get(self.var_unit[name], 0)
            if s.method == "allreduce":
                held = self.dense_bytes[name] + self.slot_bytes[name]
                accumulated[slot] = accumulated.get(slot, 0) + self.dense_bytes[name]
            else:
                held = self.sparse_bytes[name]
                share = -(-(self.dense_bytes[name] + self.slot_bytes[name]) // s.shards)
                for task in s.ps_tasks:
                    dev = strategy.ps_devices[task]
                    ps_bytes[dev] = ps_bytes.get(dev, 0) + share
            persistent[slot] = persistent.get(slot, 0) + held
        memory = {}
        for replica in strategy.replicas:
            for slot, dev in enumerate(replica):
                live, reserve = self._slot_peak(slots, slot)
                memory[dev] = memory.get(dev, 0) + live + persistent.get(slot, 0)
                if self.micro_batches > 1:
                    memory[dev] += accumulated.get(slot, 0)
                if self.resource_spec.device(dev).kind == "GPU":
                    memory[dev] += reserve
        for dev, nbytes in ps_bytes.items():
            memory[dev] = memory.get(dev, 0) + nbytes
        return memory

    def allocated_bytes(self):
        """Bytes the ops of each group allocate in all (an upper bound of their live peak), and those of the updates."""
        self.step_table()
        nbytes = allocated_bytes(self._table, self.precision)
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

    def _slot_peak(self, slots, slot):
        """``(live tensor peak, GPU runtime reserve)`` of the device at ``slot`` of a replica whose units sit on
        ``slots`` (cached)."""
        key = (slots, slot)
        if key not in self._live:
            self.step_table()
            # Update ops (no group: index -1, the last entry) are counted on slot 0's device.
            on_slot = np.array([slots[u] == slot for u in self._group_unit] + [slot == 0])[self._op_group]
            self._live[key] = (live_peak(self._table, self.precision, on_slot),
                               runtime_overhead_bytes(self._table, on_slot))
        return self._live[key]


def simulate(graph_item, resource_spec, strategy, cost_model, overlap=True):
    """Simulate one training step of ``strategy`` (see :class:`Simulator`).

    Returns
    -------
    SimResult
        With its timeline, exportable by ``to_chrome_trace()``.
    """
    return Simulator(graph_item, resource_spec, cost_model).simulate(strategy, trace=True, overlap=overlap)
