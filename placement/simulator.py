"""Event-driven simulation of one training step under a Strategy.

What one step does, as simulated:

1. **Compute.**  Each replica runs its op groups (``placement.grouping``) in
   dependency order; a device runs the groups that are ready on it in the
   order they became ready (ties by topological index).  A tensor crossing
   devices inside a replica costs its ``CommModel.transfer_phases``, queued
   on that replica's links.  Replicas on GPUs step together, so each
   group takes the slowest GPU's time (``CommModel.lockstep_pace``: the
   spread of GPU speed cost_models.overlap fits on published scaling).
2. **Synchronisation.**  A variable's gradient is ready when its gradient
   group ends; its sync starts then, so it overlaps the rest of the backward
   pass.  Allreduce: the gradients of one fusion bucket go as one collective
   once the bucket's last gradient is ready, on collective ops (NCCL) when
   the plan allreduces everything, else summed by the runtime's ordinary
   ops over gRPC (``CommModel.graph_allreduce_phases``).  The collective
   ops of one group of devices run one at a time, on one stream, in the order
   they are issued: each, its fixed latency included, starts once the one
   before it ended, so many small buckets pay their fixed costs one after
   another and can outlast the backward pass they overlap.  NCCL
   collectives on GPUs take the share of the compute they run beside that
   cost_models.overlap fits on published scaling (not the fixed cost per
   bucket fitted beside it: that is Horovod's, which TensorFlow's
   collective ops do not pay): the step grows by what the slowed compute outlasts
   (``contention_delay``, counted as exposed communication).  PS, as the
   runtime (launcher.runtime.trainer) runs it: every worker task (one per
   node) sums its replicas' gradient of each shard on its first replica
   device and pushes it once over gRPC, and the PS applies the update when
   all pushes of that shard are in (the update of a sparse one runs on
   every replica's rows).  The pulls are the next step's reads: they start
   once the step's last update has ended (one step is one function call),
   every task pulls each dense shard once and copies it to its other
   replicas, and every replica gathers its own rows of a sparse one on the
   PS.  The next step's compute waits for a pull only where it first reads
   the pull's variable (``_Schedule.pull_needed``): TensorFlow runs each op
   once its inputs are in, so a CNN's first layers run while its large
   dense layers are still being pulled; the step ends when the last pull
   ends less how long its variable is not yet needed, but no sooner than
   every link has carried the step's bytes.  A variable's
   pushes are all in flight at once in the runtime, and
   so are the pulls: the simulator takes them in turns (:meth:`_SyncRun._turn`)
   in which every node sends to a different node, as concurrent streams keep
   every NIC busy, rather than in an order that queues every task's first
   push on one PS.
   Transfers are taken in request order, and every phase of one runs in
   the first window, once it is ready, in which every link resource it
   occupies (one per direction of each port: links are full duplex) is
   free, possibly a gap that earlier reservations left; this models
   contention on NVLink/PCIe ports, NICs and PS servers.
   Where every replica process has one core (Problem.overlaps_compute), no
   allreduce starts before the replica's compute has ended; PS pushes and
   pulls still overlap it (gRPC moves them, not the replica's kernels), and
   their gRPC CPU beside it takes the replicas' cores from the compute
   (``_SyncRun.compute_delay``).
3. **Updates.**  After an allreduce, each replica device applies the
   optimizer update of the bucket's variables (after its own compute);
   a PS applies its shards' updates one at a time.  A replica CPU's update
   beside the next bucket's collective loses that collective's share of
   its cores, as compute does (``_SyncRun.update_contention``).

The step ends when the last compute, update or pull ends, and a plan one
client drives takes at least what the processes that share a few cores (an
emulated node's, or this machine's) spend on them
(:meth:`Simulator._cpu_floor`): their devices' compute, updates and
serving, plus the client's and each task's CPU per step and every gRPC
tensor's ends, as measured.

Costs: op seconds come from ``cost_model.op_costs`` (once per device model):
each op's share of a one-device step (``OpCost.step_seconds``), so that a
CPU device whose executor overlaps ops (cost_models.executor) runs its
groups in the overlapped step's time (a replica split over several such
devices uses the shares of the one-device schedule: an approximation); on a
GPU a share is the op's time.
Optimizer-update ops are charged to their variable (its own and its slots'
update ops) plus a byte-proportional share of unattributed update ops.

Batch: the job's batch is the global batch of a step.  A strategy of ``R``
replicas and ``m`` micro-batches (``Strategy.micro_batches``, else
``JobInfo.micro_batches``) runs, as the runtime does, each replica's slice
cut into ``m`` parts, forward and backward on each, one after another, then
synchronises and updates once.  It is simulated on the problem of one such
part (``Problem.at_replicas``: the step re-scaled to ``ceil(batch / R / m)``
samples, autodist.graph.rebatch), whose compute runs ``m`` times; gradients
become ready only during the last part, and the live tensors are a part's.

Plans that one client drives (any PS variable, or a replica over several
devices) pay its measured dispatch to every task before the step runs
(``Problem.client_time``); plans on collective ops have every worker run
its own step.

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
whose cost is a few events per variable and node.  The replica classes, the
devices of each slot and the wide link sets (see :class:`_LinkQueue`) are
cached per Simulator too, and so is what each fusion bucket and each PS
variable costs under one set of replica classes (its ready time, phase
lists, update seconds: ``Simulator.plans``), so a move re-prices only the
buckets and variables it changed; the memory is cached by what it
depends on (replicas, slots, micro-batches, and which variables each PS
task holds).  The busy seconds of every link and
device are expanded only when read, so an evaluation inside a search costs
in proportion to the transfers of the strategy, not to the cluster's
devices.  Contention couples every transfer to those queued before it, so
the queueing itself is simulated whole each time (a transfer's next phase
bypasses the heap when nothing queued is ready before it).  The local sum of a
task's ``k`` replicas is one transfer that occupies the links as long as
``k - 1`` copies into the first replica device one after another (they all
arrive on its port, so the queue would serialise them anyway), and likewise
the copies out after the pull.

A phase occupies its links for its duration less TensorFlow's per-tensor
overhead (``CommModel.per_tensor_overhead``), which is spent at the
endpoints before the bytes move: concurrent RPCs of different workers pay
it in parallel, so it delays a transfer without holding the link.
Phase lists from the CommModel are cached too (in the Problem).
``tests/test_simulator.py``, ``tests/test_incremental.py`` and
``tests/test_placement_properties.py`` check that the cached result equals
a fresh simulation.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping
from dataclasses import dataclass, field

from cost_models.overlap import contention_delay
from placement.problem import Problem



class _Expanded(Mapping):
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
    pull_needed: dict  # variable -> when its first reader starts (first micro-batch): its pull may come that late
    events: list
    cpu: dict  # (pool, cores) -> CPU seconds of its activations' gRPC tensor ends between tasks (Problem.grpc_cpu)


# How many bucket, shard and worker plans (see _SyncRun._cached) and memories a Simulator keeps before it starts
# again.
MAX_PLANS = 100_000
# A phase on at least this many links (a collective over many devices) is
# reserved once for its whole link set rather than link by link.
WIDE_PHASE = 16


def _first_free(lists, start, seconds):
    """The earliest time at or after ``start`` when a window of ``seconds`` overlaps no interval of ``lists``."""
    moved = True
    while moved:
        moved = False
        for starts, ends in lists:
            i = bisect.bisect_right(ends, start)  # the first interval ending after start
            if i < len(starts) and starts[i] < start + seconds and ends[i] > start:
                start, moved = ends[i], True
    return start


def _insert(intervals, start, end):
    """Add ``[start, end]`` to sorted, disjoint ``intervals`` (starts, ends), merging what it touches."""
    starts, ends = intervals
    if not ends or start > ends[-1]:  # after every interval: the usual case
        starts.append(start)
        ends.append(end)
        return
    i = bisect.bisect_left(starts, start)
    if i > 0 and ends[i - 1] >= start:  # joins the interval before (or lies inside it)
        i -= 1
        start, end = starts[i], max(end, ends[i])
        del starts[i], ends[i]
    while i < len(starts) and starts[i] <= end:  # and the ones it reaches
        end = max(end, ends[i])
        del starts[i], ends[i]
    starts.insert(i, start)
    ends.insert(i, end)


class _LinkQueue:
    """Occupation of link resources by phases, each at the earliest time all its links are free.

    Every link keeps its busy intervals; a phase takes the first window of
    its length, at or after it is ready, that is free on all of its links,
    so it may use a gap that an earlier reservation left (a transfer waiting
    for a busy receiver does not hold the sender's link idle meanwhile).
    Adjacent intervals are merged, which keeps a saturated link's list short.

    A *wide* phase (:data:`WIDE_PHASE` links or more: a collective over many
    devices) keeps one interval list for its whole link set, and every wide
    link set a list of what narrow phases reserved on its links, so neither
    kind walks a thousand links per reservation.  The windows found are the
    same as link by link: a window is free on a link set exactly when it
    overlaps no reservation of any phase sharing one of its links.  Wide
    link sets are known by the identity of their tuple (the cached phase
    lists hand out the same tuple each time), which spares hashing a
    thousand names per reservation.

    ``link_sets``: a cache, shared by the queues of one Simulator, of each
    wide link set: ``id -> (links, frozenset, ids of the wide sets it overlaps)``.
    """

    def __init__(self, link_sets=None):
        self.intervals = {}  # link -> ([starts], [ends]) of narrow phases, sorted, disjoint
        self.wide = {}  # id of a wide link tuple -> its own reservations
        self.beneath = {}  # id of a wide link tuple -> reservations of narrow phases on its links
        # shared: id -> (links, frozenset, overlapping ids), and link -> ids of the wide tuples holding it
        self.link_sets, self.wide_of_link = ({}, {}) if link_sets is None else link_sets
        self.narrow_busy = {}
        self.wide_busy = {}  # id of a wide link tuple -> seconds

    def link_busy(self):
        """Seconds each link is occupied."""
        busy = dict(self.narrow_busy)
        for key, seconds in self.wide_busy.items():
            for link in self.link_sets[key][0]:
                busy[link] = busy.get(link, 0.0) + seconds
        return busy

    def occupy(self, links, ready, seconds):
        """Reserve ``seconds`` on every link of ``links`` from the first window free on all; return (start, end).

        A phase of no occupancy (all its time is latency) holds no link and waits for none.
        """
        if seconds <= 0:
            for link in links:
                self.narrow_busy.setdefault(link, 0.0)
            return ready, ready
        if len(links) >= WIDE_PHASE:
            return self._occupy_wide(links, ready, seconds)
        intervals, busy = self.intervals, self.narrow_busy
        lists = [intervals[link] for link in links if link in intervals]
        wide = ()
        if self.wide:
            wide = {w: None for link in links for w in self.wide_of_link.get(link, ()) if w in self.wide}
            lists += [self.wide[w] for w in wide]
        start = _first_free(lists, ready, seconds) if lists else ready
        end = start + seconds
        for link in links:
            spans = intervals.get(link)
            if spans is None:
                intervals[link] = ([start], [end])
            else:
                _insert(spans, start, end)
            busy[link] = busy.get(link, 0.0) + seconds
        for w in wide:
            _insert(self.beneath[w], start, end)
        return start, end

    def _occupy_wide(self, links, ready, seconds):
        key = id(links)
        if key not in self.wide:
            self._open_wide(links)
        lists = [self.wide[w] for w in self.link_sets[key][2] if w in self.wide] + [self.beneath[key]]
        start = _first_free(lists, ready, seconds)
        end = start + seconds
        _insert(self.wide[key], start, end)
        self.wide_busy[key] = self.wide_busy.get(key, 0.0) + seconds
        return start, end

    def _open_wide(self, links):
        """Start the lists of a wide link set: its own, and what narrow phases already hold of its links."""
        key = id(links)
        if key not in self.link_sets:
            members = frozenset(links)
            overlapping = {key}
            for other, (_, other_members, other_overlapping) in self.link_sets.items():
                if not members.isdisjoint(other_members):
                    overlapping.add(other)
                    other_overlapping.add(key)
            self.link_sets[key] = (links, members, overlapping)
            for link in links:
                self.wide_of_link.setdefault(link, []).append(key)
        members = self.link_sets[key][1]
        beneath = ([], [])
        for a, b in sorted((a, b) for link, spans in self.intervals.items() if link in members for a, b in zip(*spans)):
            _insert(beneath, a, b)
        self.beneath[key] = beneath
        self.wide[key] = ([], [])


def _transfer_cpu(problem, message, phases):
    """``{pool: (CPU seconds, transfer seconds)}`` of one gRPC ``message`` moved in ``phases``."""
    duration = sum(latency + occupancy for latency, occupancy, _ in phases)
    return {pool: (seconds, duration) for pool, seconds in problem.grpc_cpu([message]).items()}


def _accumulate(total, cpu):
    """Add ``{pool: CPU seconds}`` to ``total``."""
    for pool, seconds in cpu.items():
        total[pool] = total.get(pool, 0.0) + seconds


def _add_share(total, cpu, seconds_beside):
    """Add to ``total`` ``{pool: CPU seconds}`` the share of ``cpu`` (see :func:`_transfer_cpu`) spent in the
    first ``seconds_beside`` of each transfer."""
    for pool, (seconds, duration) in cpu.items():
        share = min(seconds_beside, duration) / duration if duration > 0 else 1.0
        total[pool] = total.get(pool, 0.0) + seconds * share


class _SyncRun:
    """One step's synchronisation: transfers queued on links, updates on devices.

    ``classes`` are ``(schedule, replicas)`` pairs of identical replicas.
    Transfers wait in a heap ordered by request time; ``drain`` runs them.
    """

    def __init__(self, sim, strategy, classes, trace, overlap, collectives_overlap):
        self.sim = sim
        self.problem = sim.problem
        self.strategy = strategy
        self.collective_ops = strategy.allreduces_everything()
        self.classes = classes
        self.trace = trace
        self.overlap = overlap  # PS pushes and pulls overlap the compute (False: the what-if without overlap)
        self.collectives_overlap = collectives_overlap  # collectives and graph allreduces overlap the compute
        # one-core replicas, which give gRPC's CPU beside their compute up from it (compute_delay)
        self.one_core = overlap and not collectives_overlap
        self.links = _LinkQueue(sim.link_sets)
        self.events = []
        self.finish = [max(schedule.end for schedule, _ in classes)]
        self.upd_free = {(c, slot): t for c, (sch, _) in enumerate(classes) for slot, t in sch.slot_end.items()}
        self.upd_busy = {}
        self.ps_free = {}
        self.pulls = []  # (turn, request index, phases, label, needed, CPU) of the pulls that follow the step
        self.busy = {}
        self.heap = []
        self.seq = 0
        self.stream_free = {}  # devices of a collective group -> when its stream is next free
        self.collective_spans = []  # (start, end, compute contention) of collectives that take from compute
        self.cpu = {}  # (pool, cores) -> CPU seconds its processes spend on gRPC transfers (Problem.grpc_cpu)
        self.beside_compute = {}  # (pool, cores) -> the part of those spent while one-core replicas compute
        self.cpu_updates = []  # (start, end) of the optimizer updates that replica CPUs apply

    def charge(self, cpu):
        """Add ``{(pool, cores): CPU seconds}`` of gRPC transfers to the step's."""
        _accumulate(self.cpu, cpu)

    def compute_delay(self):
        """Seconds the step grows by where one-core replicas compute while gRPC moves PS pushes and pulls
        beside them: the tensors' CPU at each end (Problem.grpc_cpu), spent evenly over each transfer, takes
        their cores from the compute for the share of the transfer that runs beside it, by the most any pool
        of cores that holds a replica gives up."""
        if not self.beside_compute:
            return 0.0
        problem = self.problem
        computing = {problem.core_pool(d) for _, members in self.classes for r in members for d in r}
        return max((seconds / pool[1] for pool, seconds in self.beside_compute.items() if pool in computing),
                   default=0.0)

    def device_busy(self):
        """Seconds each device computes, updates or serves."""
        busy = dict(self.busy)
        for c, (schedule, members) in enumerate(self.classes):
            for slot, seconds in schedule.slot_busy.items():
                seconds += self.upd_busy.get((c, slot), 0.0)
                for r in members:
                    busy[r[slot]] = busy.get(r[slot], 0.0) + seconds
        return busy

    def ready(self, schedule, var):
        """When ``var``'s gradient can go into an allreduce."""
        return schedule.gradient_ready[var] if self.collectives_overlap else schedule.end

    def pushable(self, schedule, var):
        """When ``var``'s gradient can be pushed to a PS (a gRPC send, which needs no kernel of the replica's)."""
        return schedule.gradient_ready[var] if self.overlap else schedule.end

    def needed(self, schedule, var):
        """How long after the next step's compute starts its first read of ``var`` waits for the pull."""
        return schedule.pull_needed[var] if self.overlap else 0.0

    def submit(self, t, phases, label, on_done, stream=None, contention=None):
        """Queue ``phases`` from ``t``; a collective names its ``stream`` (its devices) and runs atomically,
        taking ``contention`` (a fraction, or None) of its time from the compute it runs beside."""
        if not phases:
            on_done(t)
            return
        heapq.heappush(self.heap, (t, self.seq, 0, phases, label, on_done, stream, contention))
        self.seq += 1

    def drain(self):
        """Run every queued transfer; a collective runs its phases back to back, on its group's one
        stream in the order the collectives are issued (each starts, latency included, once the one
        before it ended); separate transfers queue phase by phase.

        A transfer's next phase goes on at once, without the heap, when it is ready before anything
        queued: the heap would hand it out next anyway.
        """
        heap, occupy, trace, stream_free = self.heap, self.links.occupy, self.trace, self.stream_free
        while heap:
            t, _, index, phases, label, on_done, stream, contention = heapq.heappop(heap)
            if stream is not None:  # a collective: all its phases, once its stream is free
                end = begin = max(t, stream_free.get(stream, t))
                for latency, occupancy, used in phases:
                    start, end = occupy(used, end + latency, occupancy)
                    if trace:
                        self.events.append((label, "sync", "+".join(used) or "local", start, end))
                stream_free[stream] = end
                if contention:
                    self.collective_spans.append((begin, end, contention))
                on_done(end)
                continue
            end = t
            while True:
                latency, occupancy, used = phases[index]
                start, end = occupy(used, end + latency, occupancy)
                if trace:
                    self.events.append((label, "sync", "+".join(used) or "local", start, end))
                index += 1
                if index == len(phases):
                    on_done(end)
                    break
                if heap and heap[0][0] <= end:
                    heapq.heappush(heap, (end, self.seq, index, phases, label, on_done, stream, contention))
                    self.seq += 1
                    break

    def _cached(self, key, build):
        """What ``build()`` returns for ``key`` under this run's replica classes and overlap, cached on the
        Simulator (which forgets them all past :data:`MAX_PLANS`)."""
        key += (id(self.classes), self.overlap, self.collectives_overlap)
        plans = self.sim.plans
        cached = plans.get(key)
        if cached is None or cached[0] is not self.classes:
            if len(plans) >= MAX_PLANS:
                plans.clear()
            cached = plans[key] = (self.classes, build())
        return cached[1]

    # -- allreduce ---------------------------------------------------------
    def allreduce(self, algorithm, bucket, slot, names, devices, compression="none", gathered=()):
        """One fused collective once the bucket's last gradient is ready, then the updates.

        A compressed bucket moves its wire bytes; its cast before the
        collective and back after runs on the slowest replica device.
        ``gathered``: the sparse gradients among ``names`` whose rows are
        all-gathered after the bucket's sum (every replica then updates the
        rows of all: launcher.runtime.collective and the one-client
        runtime); the others are summed as dense tensors.
        What the bucket costs is the Simulator's to cache (:meth:`_bucket_plan`).
        """
        ready, phases, label, cast, updates, update_label, contention, cpu = self._cached(
            (algorithm, bucket, slot, names, devices, compression, gathered, self.collective_ops),
            lambda: self._bucket_plan(algorithm, bucket, slot, names, devices, compression, gathered))
        self.charge(cpu)
        self.submit(ready, phases, label, lambda t: self._apply(t + cast, updates, update_label),
                    # NCCL runs a group's collectives on one stream; ordinary ops summing separate buckets do not
                    # wait for each other.
                    stream=devices if self.collective_ops else (devices, bucket), contention=contention)

    def _bucket_plan(self, algorithm, bucket, slot, names, devices, compression, gathered):
        """``(ready, phases, label, cast seconds, updates, update label, compute contention, gRPC CPU)`` of one
        bucket; ``updates``: per class, ``(class, device that applies them, seconds)``; the contention: what the
        collective takes from the compute beside it (CommModel.compute_contention), None for ordinary ops; the
        CPU: what ordinary ops' gRPC tensors cost their processes (Problem.grpc_cpu)."""
        problem = self.problem
        collective_ops = self.collective_ops
        gathered = gathered if len(devices) > 1 else ()
        summed = [v for v in names if v not in gathered]
        dense = sum(problem.dense_bytes[v] for v in summed)
        nbytes = dense if compression == "none" else sum(problem.compressed_bytes[v] for v in summed)
        cast = problem.cast_seconds(devices, dense, nbytes)
        ready = cast + max(self.ready(schedule, v) for schedule, _ in self.classes for v in names)
        phases = problem.phase_list(
            ("ar", devices, algorithm, nbytes, collective_ops),
            lambda: problem.allreduce_phases(devices, algorithm, nbytes, collective_ops),
        ) if summed else []
        for v in gathered:
            rows = problem.sparse_bytes[v]
            phases = phases + problem.phase_list(("ag", devices, rows),
                                                 lambda: problem.sparse_allgather_phases(devices, rows))
        label = f"allreduce {algorithm} bucket {bucket}" + (f" {compression}" if compression != "none" else "")
        updates = []
        for c, (_, members) in enumerate(self.classes):
            device = members[0][slot]
            costs = problem.device_costs(problem.resource_spec.device(device))[1]
            updates.append(((c, slot), device, sum(self._update_seconds(costs, v, device, gathered, len(devices))
                                                   for v in names)))
        contention, cpu = None, {}
        if collective_ops and phases:
            contention = problem.comm.compute_contention(devices, nbytes=nbytes,
                                                         seconds=sum(occupancy + latency for latency, occupancy, _ in phases))
        elif phases and problem.core_pools:  # the one-client runtime's ops: a gRPC sum, every replica's rows to all
            spec = problem.resource_spec
            messages = problem.comm.graph_allreduce_messages(nbytes, devices, algorithm) if summed else []
            messages += [(a, b, problem.sparse_bytes[v], 1) for v in gathered for a in devices for b in devices
                         if spec.device(a).node != spec.device(b).node]
            cpu = problem.grpc_cpu(messages)
        return ready, phases, label, cast, updates, f"update bucket {bucket}", contention, cpu

    def _update_seconds(self, costs, name, device, gathered, replicas):
        """One replica's update of allreduced variable ``name`` (``costs``: its device's updates at one
        replica's batch): the whole batch's rows where they were gathered; where a sparse gradient was summed
        densely, at least the whole table streamed (the captured ops may already be dense: Keras' Adam
        densifies its slots' update); else as captured."""
        if name in gathered:
            return self.problem.gathered_update_seconds(device, name)
        if name in self.problem.sparse_gradients and replicas > 1:
            return max(costs[name], self.problem.dense_update_seconds(device, name))
        return costs[name]

    def _apply(self, t, updates, label):
        for key, device, seconds in updates:
            start = max(t, self.upd_free[key])
            stop = start + seconds
            self.upd_free[key] = stop
            self.upd_busy[key] = self.upd_busy.get(key, 0.0) + stop - start
            self.finish.append(stop)
            if not self.problem.is_gpu[device]:
                self.cpu_updates.append((start, stop))
            if self.trace:
                self.events.append((label, "update", device, start, stop))

    def update_contention(self):
        """Seconds the step grows by where CPU collectives take their share of the cores that replica CPUs
        apply updates on beside them (one bucket's update beside the next bucket's collective): the updates
        lose that share of their time beside each collective, and the last of them ends that much later.  On
        GPUs the update kernels are left as they are: the fitted NCCL contention is compute's."""
        if not self.cpu_updates or not self.collective_spans:
            return 0.0
        lost = sum(share * max(0.0, min(end, stop) - max(begin, start))
                   for begin, end, share in self.collective_spans for start, stop in self.cpu_updates)
        return max(0.0, max(stop for _, stop in self.cpu_updates) + lost - self.end())

    # -- parameter servers -------------------------------------------------
    def _workers(self, c, slot):
        """Class ``c``'s devices at ``slot``, per worker task (one per node): a tuple each, in node order."""
        return self._cached(("workers", c, slot), lambda: self._group_by_node(c, slot))

    def _group_by_node(self, c, slot):
        spec = self.problem.resource_spec
        by_node = {}
        for r in self.classes[c][1]:
            by_node.setdefault(spec.device(r[slot]).node, []).append(r[slot])
        return [tuple(devs) for _, devs in sorted(by_node.items())]

    def parameter_server(self, name, slot):
        """Every task sums its replicas' gradient of each shard and pushes it once, in turns; the PS updates
        the shard; the pulls wait for :meth:`pull`.  What each shard costs is the Simulator's to cache
        (:meth:`_shard_plans`)."""
        s = self.strategy.sync[name]
        devices = tuple(self.strategy.ps_devices[task] for task in s.ps_tasks)
        plans = self._cached((name, s.shards, devices, slot), lambda: self._shard_plans(name, s.shards, devices, slot))
        requests = []
        for i, (ps_device, pushes, pulls, cost, labels, cpu, beside) in enumerate(plans):
            self.charge(cpu)
            _accumulate(self.beside_compute, beside)
            pushed = self._after_pushes(len(pushes), ps_device, cost, labels[1])
            requests += [(turn, i, ready, phases, labels[0], pushed) for turn, ready, phases in pushes]
            self.pulls += [(turn, len(self.pulls), phases, labels[2], needed, cpu)
                           for turn, phases, needed, cpu in pulls]
        for _, _, ready, phases, label, pushed in sorted(requests, key=lambda r: r[:2]):
            self.submit(ready, phases, label, pushed)

    def pull(self):
        """The next step's pulls, all requested at once when this step's last compute, update or transfer has
        ended (the runtime's step is one function call, whose reads of a PS variable come before its
        update), in turn order (:meth:`_turn`); then run them.  The next step's compute waits for each
        only at its variable's first reader (TensorFlow runs an op once its inputs are in): this step
        ends when the last pull ends, less how long after the compute starts its variable is needed, and
        no sooner than every link has carried all of its step's bytes (it has a step's time for them, no
        more).  On one-core replicas, a pull still arriving when the compute starts spends its CPU beside
        it (:meth:`compute_delay`)."""
        if not self.pulls:
            return
        start = self.end()
        one_core = self.one_core
        arrivals = []  # (arrival, CPU) of each pull, on one-core replicas

        def arrived(t, needed, cpu):
            self.finish.append(max(start, t - needed))
            if one_core:
                arrivals.append((t, cpu))

        for _, _, phases, label, needed, cpu in sorted(self.pulls, key=lambda p: p[:2]):
            self.submit(start, phases, label, lambda t, needed=needed, cpu=cpu: arrived(t, needed, cpu))
        self.drain()
        self.finish.append(max(self.links.narrow_busy.values(), default=0.0))
        computing = self.end()
        for t, cpu in arrivals:
            if t > computing:
                _add_share(self.beside_compute, cpu, t - computing)

    def feed(self):
        """The next step's input, sent with its pulls: a one-client plan's client, on the first worker's node,
        sends every replica its slice of the global batch (all of its micro-batches) over gRPC
        (launcher.runtime.trainer slices the batch its step is called with, on the client).  The client is a
        process of its own: a replica on its node receives its slice over that node's loopback, as from a
        task on its own device."""
        feeds, cpu = self._cached(("feed",), self._feeds)
        self.pulls += feeds
        self.charge(cpu)

    def client_device(self):
        """The device on whose node the one client runs: the first worker's (in node order)."""
        problem, spec = self.problem, self.problem.resource_spec
        return min((r[0] for r in self.strategy.replicas), key=lambda d: problem.node_index[spec.device(d).node])

    def _feeds(self):
        problem, spec = self.problem, self.problem.resource_spec
        firsts = [r[0] for r in self.strategy.replicas]
        client = self.client_device()
        nbytes = problem.input_bytes * problem.micro_batches_of(self.strategy)
        here = spec.device(client).node
        sources = [d if spec.device(d).node == here else client for d in firsts]  # same node: over its loopback
        feeds = [(self._turn(client, d), -1, self._ps_transfer(source, d, nbytes), f"input to {d}", 0.0, {})
                 for source, d in zip(sources, firsts)]
        return feeds, problem.grpc_cpu([(source, d, nbytes, 1) for source, d in zip(sources, firsts)])

    def end(self):
        """When the step's last compute, transfer or update (on a replica or a PS) has ended."""
        return max(max(self.finish), max(self.upd_free.values(), default=0.0), max(self.ps_free.values(), default=0.0))

    def _shard_plans(self, name, shards, ps_devices, slot):
        """Per shard: ``(PS device, pushes as (turn, ready, phases), pulls as (turn, phases, needed, CPU),
        update seconds, (push, update, pull) labels, CPU of their gRPC tensors (Problem.grpc_cpu), the pushes'
        part of it spent while one-core replicas compute)``; see :meth:`_turn`, :meth:`needed` and
        :meth:`compute_delay` (a pull's CPU counts there where it arrives after the compute started)."""
        problem = self.problem
        nbytes = -(-problem.sparse_bytes[name] // shards)
        # A sparse gradient (IndexedSlices) is summed by concatenating the replicas' rows.
        sparse = name in problem.sparse_gradients
        targets = [(c, devs) for c in range(len(self.classes)) for devs in self._workers(c, slot)]
        one_core = self.one_core
        plans = []
        for i, ps_device in enumerate(ps_devices):
            pushes, pulls, messages, beside = [], [], [], {}
            for c, devs in targets:
                schedule = self.classes[c][0]
                pushed = nbytes * len(devs) if sparse else nbytes
                ready, needed = self.pushable(schedule, name), self.needed(schedule, name)
                phases = self._local_copies(devs, nbytes, inward=True) + self._ps_transfer(devs[0], ps_device, pushed)
                pushes.append((self._turn(devs[0], ps_device), ready, phases))
                messages.append((devs[0], ps_device, pushed, 1))
                if one_core and ready < schedule.end:
                    _add_share(beside, _transfer_cpu(problem, messages[-1], phases), schedule.end - ready)
                # every replica gathers its own rows of a sparse shard on the PS (launcher.runtime.trainer._gather_rows)
                for d in devs if sparse else devs[:1]:
                    phases = self._ps_transfer(ps_device, d, nbytes)
                    phases = phases if sparse else phases + self._local_copies(devs, nbytes, inward=False)
                    messages.append((ps_device, d, nbytes, 1))
                    pulls.append((self._turn(ps_device, d), phases, needed,
                                  _transfer_cpu(problem, messages[-1], phases) if one_core else {}))
            # a sparse shard's update runs on every replica's rows, as an allreduced one's does once gathered
            cost = (problem.gathered_update_seconds(ps_device, name) if sparse
                    else problem.device_costs(problem.resource_spec.device(ps_device))[1][name]) / shards
            label = f"{name}/{i}"
            plans.append((ps_device, pushes, pulls, cost, (f"push {label}", f"update {label}", f"pull {label}"),
                          problem.grpc_cpu(messages), beside))
        return plans

    def _turn(self, src, dst):
        """When, among its concurrent transfers of one variable, ``src``'s to ``dst`` is taken: their nodes'
        distance in node order, so that each turn pairs every sender with a different receiver (the NICs all
        busy at once, as concurrent gRPC streams keep them, rather than every task's first push queued on the
        first PS)."""
        index = self.problem.node_index
        spec = self.problem.resource_spec
        return (index[spec.device(dst).node] - index[spec.device(src).node]) % len(index)

    def _ps_transfer(self, src, dst, nbytes):
        problem = self.problem
        return problem.phase_list(("ps", src, dst, nbytes), lambda: problem.ps_phases(src, dst, nbytes))

    def _local_copies(self, devs, nbytes, inward):
        """A task's ``nbytes`` from each of its other replica devices into its first one (``inward``), or back out."""
        if len(devs) < 2:
            return []
        problem, hub, other = self.problem, devs[0], devs[1]
        src, dst = (other, hub) if inward else (hub, other)
        copies = len(devs) - 1
        return problem.phase_list(("local", src, dst, nbytes, copies),
                                  lambda: problem.transfer_phases(src, dst, nbytes), copies)

    def _after_pushes(self, pending, ps_device, cost, label):
        """The callback that, at the last push of a shard, updates it."""
        left = [pending]

        def pushed(t):
            left[0] -= 1
            if left[0]:
                return
            start = max(t, self.ps_free.get(ps_device, 0.0))
            stop = start + cost
            self.ps_free[ps_device] = stop
            self.busy[ps_device] = self.busy.get(ps_device, 0.0) + cost
            if self.trace:
                self.events.append((label, "update", ps_device, start, stop))

        return pushed


class Simulator:
    """Evaluates strategies of one :class:`~placement.problem.Problem`, caching compute schedules.

    Parameters
    ----------
    problem : placement.problem.Problem
    """

    def __init__(self, problem):
        self.problem = problem
        self._shares = {}  # the simulators of the problem's replica shares (Problem.at_replicas)
        self._schedules = {}
        self._classes = {}
        self._memory = {}  # what Simulator.memory depends on -> (replica list, peak bytes per device)
        self.link_sets = ({}, {})  # see _LinkQueue
        # what one bucket or one PS variable costs under the replica classes it is simulated with (see _SyncRun)
        self.plans = {}
        self._whole_bytes = {name: nbytes + problem.slot_bytes[name] for name, nbytes in problem.dense_bytes.items()}

    def _share(self, strategy):
        """The simulator of ``strategy``'s part of the batch (one micro-batch of one replica's slice): this one
        where that is the whole captured batch."""
        problem = self.problem.at_replicas(len(strategy.replicas), self.problem.micro_batches_of(strategy))
        if problem is self.problem:
            return self
        if id(problem) not in self._shares:
            self._shares[id(problem)] = Simulator(problem)
        return self._shares[id(problem)]

    # -- compute ---------------------------------------------------------
    def _schedule(self, replica, slots, trace, micro_batches, pace=1.0):
        if len(replica) == 1:
            key = (self.problem.device_model[replica[0]], micro_batches, pace)
        else:
            key = (tuple(replica), slots, micro_batches, pace)
        cached = self._schedules.get(key)
        if cached is not None and (cached.events or not trace):
            return cached
        devices = [self.problem.resource_spec.device(d) for d in replica]
        schedule = self._run_compute(replica, devices, slots, trace, micro_batches, pace)
        self._schedules[key] = schedule
        return schedule

    def _run_compute(self, replica, devices, slots, trace, micro_batches, pace):
        """One replica's compute schedule; every group takes ``pace`` times its cost (the slowest replica's)."""
        groups = self.problem.groups.groups
        n = len(groups)
        costs = [[pace * c for c in self.problem.device_costs(d)[0]] for d in devices]
        slot_of = [slots[self.problem.group_unit[g]] if len(replica) > 1 else 0 for g in range(n)]
        remaining = [len(p) for p in self.problem.preds]
        succs = self.problem.groups.successors()
        ready_at = [0.0] * n
        began = [0.0] * n
        end = [0.0] * n
        free = {}
        busy = {}
        links = _LinkQueue(self.link_sets)
        events = []
        between_tasks = []  # (src, dst, bytes, micro-batches) of activations between two nodes' tasks
        node_of = {d.name: d.node for d in devices}
        heap = [(0.0, g) for g in range(n) if remaining[g] == 0]
        heapq.heapify(heap)
        while heap:
            ready, g = heapq.heappop(heap)
            slot = slot_of[g]
            start = max(ready, free.get(slot, 0.0))
            finish = start + costs[slot][g]
            began[g] = start
            free[slot] = finish
            busy[slot] = busy.get(slot, 0.0) + costs[slot][g]
            end[g] = finish
            if trace:
                events.append((groups[g].name, "compute", replica[slot], start, finish))
            for h, nbytes in succs[g]:
                arrive = finish
                if slot_of[h] != slot:
                    src, dst = replica[slot], replica[slot_of[h]]
                    phases = self.problem.phase_list(("xfer", src, dst, nbytes),
                                                     lambda: self.problem.transfer_phases(src, dst, nbytes))
                    for latency, occupancy, used in phases:
                        t0, arrive = links.occupy(used, arrive + latency, occupancy)
                        if trace:
                            events.append((f"{groups[g].name}->{groups[h].name}", "activation", "+".join(used), t0, arrive))
                    if node_of[src] != node_of[dst]:
                        between_tasks.append((src, dst, nbytes, micro_batches))
                if arrive > ready_at[h]:
                    ready_at[h] = arrive
                remaining[h] -= 1
                if remaining[h] == 0:
                    heapq.heappush(heap, (ready_at[h], h))
        one = max(end, default=0.0)  # one micro-batch (this problem's step is one part)
        earlier = (micro_batches - 1) * one  # the micro-batches before the last one
        gradient_ready = {v: earlier + end[g] for v, g in self.problem.groups.gradient_group.items()}
        pull_needed = {v: began[g] for v, g in self.problem.groups.read_group.items()}
        if earlier:
            free = {slot: earlier + t for slot, t in free.items()}
            busy = {slot: t * micro_batches for slot, t in busy.items()}
            events = [(name, kind, where, earlier + a, earlier + b) for name, kind, where, a, b in events]
            label = f"micro-batches 1-{micro_batches - 1}"
            events += [(label, "compute", d, 0.0, earlier) for d in replica]
        return _Schedule(earlier + one, free, busy, gradient_ready, pull_needed, events,
                         self.problem.grpc_cpu(between_tasks))

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
        share = self._share(strategy)
        if share is not self:
            return share.simulate(strategy, trace, overlap)
        slots = self._slots(strategy)
        classes = self._replica_classes(strategy.replicas, slots, trace, self.problem.micro_batches_of(strategy))
        var_slot = self._var_slots(strategy)
        run = _SyncRun(self, strategy, classes, trace, overlap,
                       overlap and self.problem.overlaps_compute(strategy.replicas))
        for schedule, members in classes:
            if schedule.cpu:  # a model-parallel replica's activations between nodes (nothing on one device)
                run.charge({pool: seconds * len(members) for pool, seconds in schedule.cpu.items()})

        buckets = {}  # (algorithm, bucket, slot, compression) -> variables
        ps_vars = []
        for name in sorted(strategy.sync):
            s = strategy.sync[name]
            if s.method == "allreduce":
                key = (s.algorithm, s.bucket, var_slot[name] if var_slot else 0, s.compression)
                buckets.setdefault(key, []).append(name)
            else:
                ps_vars.append(name)
        # issued in bucket order, as the runtimes run them (launcher.runtime.collective, launcher.runtime.trainer)
        for (algorithm, bucket, slot, compression), names in sorted(buckets.items(), key=lambda kv: (kv[0][1:], kv[0])):
            gathered = self.problem.gathered(strategy, names)
            run.allreduce(algorithm, bucket, slot, tuple(names), self._slot_devices(strategy.replicas, slot),
                          compression, gathered)
        for name in ps_vars:
            run.parameter_server(name, var_slot[name] if var_slot else 0)
        run.drain()
        if not strategy.allreduces_everything():
            run.feed()
        run.pull()

        compute_time = run.finish[0]
        client_time = self.problem.client_time(strategy)
        step_time = client_time + run.end()
        step_time += (contention_delay(compute_time, run.collective_spans) + run.update_contention()
                      + run.compute_delay())
        cpu_bound = () if strategy.allreduces_everything() else self._cpu_floor(strategy, run)
        if cpu_bound and cpu_bound[1] > step_time:
            step_time = cpu_bound[1]
        else:
            cpu_bound = ()
        memory = self.memory(strategy, slots)
        events = run.events
        if trace:
            for schedule, _ in classes:
                events.extend(schedule.events)
            if client_time:  # the loop that drives the step runs before any of it
                events = [(n, c, r, start + client_time, end + client_time) for n, c, r, start, end in events]
                loop = ("each replica's own loop" if strategy.allreduces_everything()
                        else "dispatch the step to every task")
                events.append((loop, "client", "client", 0.0, client_time))
        return SimResult(
            step_time=step_time,
            compute_time=compute_time,
            exposed_comm_time=max(0.0, step_time - compute_time - client_time),
            link_busy=_Expanded(run.links.link_busy),
            device_busy=_Expanded(run.device_busy),
            memory=memory,
            memory_limit={d: self.problem.memory_bytes[d] for d in memory},
            events=sorted(events, key=lambda e: (e[3], e[2], e[0])) if trace else [],
            replicas=len(strategy.replicas),
            client_time=client_time,
            cpu_bound=cpu_bound,
        )

    def _cpu_floor(self, strategy, run):
        """``(pool, seconds)``: the longest a one-client step can take on the CPU of cores that its processes
        share (an emulated node's, or this machine's: Problem.core_pool), ``()`` without such a pool.

        Every process on those cores, the client (on the first worker's
        node), the worker and PS tasks, runs on them: the step takes at least
        the core-seconds its devices compute, update and serve, plus the
        client's CPU per step, each task's for its part, and that of every
        gRPC tensor at its ends (Problem.grpc_cpu: pushes, pulls, input
        feeds, graph-allreduce chunks, and a model-parallel replica's
        activations between its nodes' tasks), as ``profile remote-steps``
        measured them, over the cores.
        """
        problem = self.problem
        if not problem.core_pools:
            return ()
        tasks = problem.remote_tasks(strategy)
        client, per_task = problem.comm.client_cpu_seconds(len(tasks))
        cpu = dict(run.cpu)
        for device, seconds in [(d, per_task) for d in tasks] + [(run.client_device(), client)]:
            pool = problem.core_pool(device)
            if pool is not None:
                cpu[pool] = cpu.get(pool, 0.0) + seconds
        for device, seconds in run.device_busy().items():
            pool = problem.core_pool(device)
            if pool is not None:  # a process given fewer cores than the pool's keeps only those busy
                cpu[pool] = cpu.get(pool, 0.0) + seconds * (problem.device_model[device][1] or pool[1])
        floors = [(seconds / cores, name) for (name, cores), seconds in cpu.items()]
        return max(floors)[::-1] if floors else ()

    # -- memory ------------------------------------------------------------
    def memory(self, strategy, slots=None):
        """Peak bytes per device (see cost_models.memory).

        A replica device holds, for allreduce variables of its groups, the
        variable and its optimizer slots (and an accumulation buffer when
        the step accumulates micro-batches); for PS variables, its local copy
        of what it reads; and the peak of the live tensors of the ops of its
        groups (gradients included, until their update).  A PS device holds
        its shards of the variables and of their slots.
        """
        share = self._share(strategy)
        if share is not self:
            return share.memory(strategy, slots)
        if slots is None:
            slots = self._slots(strategy)
        # what the memory depends on: replicas, slots, micro-batches, and which variables go to which PS task
        key = (id(strategy.replicas), slots, self.problem.micro_batches_of(strategy), tuple(strategy.ps_devices),
               tuple((name, s.ps_tasks) for name, s in strategy.sync.items() if s.method != "allreduce"))
        cached = self._memory.get(key)
        if cached is None or cached[0] is not strategy.replicas:
            if len(self._memory) >= MAX_PLANS:
                self._memory.clear()
            cached = self._memory[key] = (strategy.replicas, self._memory_of(strategy, slots))
        return dict(cached[1])

    def _memory_of(self, strategy, slots):
        problem = self.problem
        var_slot = self._var_slots(strategy)
        dense, sparse, whole = problem.dense_bytes, problem.sparse_bytes, self._whole_bytes
        persistent, accumulated, ps_bytes = {}, {}, {}
        for name, s in strategy.sync.items():
            slot = var_slot[name] if var_slot else 0
            if s.method == "allreduce":
                held = whole[name]
                accumulated[slot] = accumulated.get(slot, 0) + dense[name]
            else:
                held = sparse[name]
                tasks = s.ps_tasks
                share = -(-whole[name] // len(tasks))
                for task in tasks:
                    dev = strategy.ps_devices[task]
                    ps_bytes[dev] = ps_bytes.get(dev, 0) + share
            persistent[slot] = persistent.get(slot, 0) + held
        # what a device at each slot holds, besides the GPU runtime reserve
        held, reserves = [], []
        for slot in range(max(map(len, strategy.replicas))):
            live, reserve = problem.slot_peak(slots, slot)
            extra = accumulated.get(slot, 0) if problem.micro_batches_of(strategy) > 1 else 0
            held.append(live + persistent.get(slot, 0) + extra)
            reserves.append(reserve)
        is_gpu = problem.is_gpu
        if len(held) == 1:
            on_gpu, on_cpu = held[0] + reserves[0], held[0]
            memory = {r[0]: on_gpu if is_gpu[r[0]] else on_cpu for r in strategy.replicas}
        else:
            memory = {}
            for replica in strategy.replicas:
                for slot, dev in enumerate(replica):
                    memory[dev] = memory.get(dev, 0) + held[slot] + (reserves[slot] if is_gpu[dev] else 0)
        for dev, nbytes in ps_bytes.items():
            memory[dev] = memory.get(dev, 0) + nbytes
        return memory

    def _slots(self, strategy):
        """The slot of every op group unit, in unit order."""
        if not strategy.group_slots:
            return self.problem.no_slots
        return tuple(strategy.group_slots.get(u, 0) for u in self.problem.groups.units)

    def _replica_classes(self, replicas, slots, trace, micro_batches):
        """``(schedule, replicas)`` pairs of the replicas with one compute schedule, cached per replica list."""
        key = (id(replicas), slots, trace, micro_batches)
        cached = self._classes.get(key)
        if cached is None or cached[0] is not replicas:
            classes = {}
            pace = self.problem.comm.lockstep_pace(replicas)
            for replica in replicas:
                schedule = self._schedule(replica, slots, trace, micro_batches, pace)
                classes.setdefault(id(schedule), (schedule, []))[1].append(replica)
            cached = (replicas, list(classes.values()))
            self._classes[key] = cached
        return cached[1]

    def _slot_devices(self, replicas, slot):
        """The device at ``slot`` of every replica (cached per replica list)."""
        key = (id(replicas), "slot", slot)
        cached = self._classes.get(key)
        if cached is None or cached[0] is not replicas:
            cached = (replicas, tuple(r[slot] for r in replicas))
            self._classes[key] = cached
        return cached[1]

    def _var_slots(self, strategy):
        """The slot of every variable's unit, or None when every unit is on slot 0."""
        if not strategy.group_slots:
            return None
        return {v: strategy.group_slots.get(unit, 0) for v, unit in self.problem.var_unit.items()}


def simulate(graph_item, resource_spec, strategy, cost_model, overlap=True):
    """Simulate one training step of ``strategy`` (see :class:`Simulator`).

    Returns
    -------
    SimResult
        With its timeline, exportable by ``to_chrome_trace()``.
    """
    return Simulator(Problem(graph_item, resource_spec, cost_model)).simulate(strategy, trace=True, overlap=overlap)
