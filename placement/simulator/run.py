"""One step's synchronisation: its transfers on the event engine, its updates on devices, its CPU."""

from __future__ import annotations

from placement.simulator.collectives import CollectiveSync
from placement.simulator.cpu import accumulate
from placement.simulator.engine import EventEngine
from placement.simulator.ps import ParameterServerSync
from placement.simulator.stream import run_stream

# How many bucket, shard and worker plans (see SyncRun._cached) and memories a Simulator keeps before it starts
# again.
MAX_PLANS = 100_000


class SyncRun(CollectiveSync, ParameterServerSync):
    """One step's synchronisation: transfers queued on links, updates on devices.

    ``classes`` are ``(schedule, replicas)`` pairs of identical replicas.
    Its tasks run on one :class:`~placement.simulator.engine.EventEngine`; the allreduce
    accounting is :class:`~placement.simulator.collectives.CollectiveSync`'s, the PS one
    :class:`~placement.simulator.ps.ParameterServerSync`'s.
    """

    def __init__(self, sim, strategy, classes, trace, overlap, collectives_overlap, collective_ops, give_up=None):
        self.sim = sim
        self.problem = sim.problem
        self.strategy = strategy
        self.collective_ops = collective_ops  # the plan runs on collective ops (Strategy.allreduces_everything)
        self.classes = classes
        self.trace = trace
        self.overlap = overlap  # PS pushes and pulls overlap the compute (False: the what-if without overlap)
        self.collectives_overlap = collectives_overlap  # collectives and graph allreduces overlap the compute
        # one-core replicas, which give gRPC's CPU beside their compute up from it (compute_delay)
        self.one_core = overlap and not collectives_overlap
        self.engine = EventEngine(sim.link_sets, trace)
        self.replay = None  # (plans, devices) of a stream run (see link_busy)
        self.events = self.engine.events  # the engine's phases, then updates, as they happen
        self.finish = [max(schedule.end for schedule, _ in classes)]
        self.upd_free = {(c, slot): t for c, (sch, _) in enumerate(classes) for slot, t in sch.slot_end.items()}
        self.upd_busy = {}
        self.ps_free = {}
        self.pulls = []  # (turn, request index, phases, label, needed, CPU) of the pulls that follow the step
        self.busy = {}
        self.cpu = {}  # (pool, cores) -> CPU seconds its processes spend on gRPC transfers (Problem.grpc_cpu)
        self.beside_compute = {}  # (pool, cores) -> the part of those spent while one-core replicas compute
        self.cpu_updates = []  # (start, end) of the optimizer updates that replica CPUs apply
        # called, before the pulls, with at most the step time: True stops the run (ps.GaveUp)
        self.give_up = give_up
        self.client_time = 0.0

    def execute(self, graph):
        """Run the synchronisation of lowered ``graph`` (:class:`~placement.simulator.taskgraph.StepGraph`):
        its compute classes' activations' CPU, its collectives in issue order (on collective ops, then the
        average of the step's outputs: :meth:`outputs_plan`), its PS variables, then the next step's input
        feeds and pulls."""
        self.client_time = graph.client_time
        for schedule, members in graph.classes:
            if schedule.cpu:  # a model-parallel replica's activations between nodes (nothing on one device)
                self.charge({pool: seconds * len(members) for pool, seconds in schedule.cpu.items()})
        outputs = self.outputs_plan(graph)
        if self._one_stream(graph):
            plans = [self.collective_plan(c) for c in graph.collectives] + ([outputs] if outputs else [])
            self.sim.stream_log = run_stream(self, plans, self.sim.stream_log)
            self.replay = (plans, graph.collectives[0].devices)
            return
        for c in graph.collectives:
            self.allreduce(c)
        if outputs:
            self.submit_plan(outputs, self.sim.slot_devices(self.strategy.replicas, 0))
        for p in graph.ps_variables:
            self.parameter_server(p.variable, p.slot)
        self.engine.drain()
        if graph.feeds:
            self.feed()
        self.pull()

    def _one_stream(self, graph):
        """Whether ``graph`` is one stream of collectives that placement.simulator.stream runs from the run before
        (an incremental Simulator's untraced run of a plan on collective ops)."""
        collectives = graph.collectives
        return (self.sim.incremental and not self.trace and graph.collective_ops and collectives
                and all(c.devices is collectives[0].devices for c in collectives))

    def link_busy(self):
        """Seconds each link is occupied; a stream run (:meth:`_one_stream`) puts its collectives on the link
        calendar only when this is read."""
        if self.replay is not None:
            plans, devices = self.replay
            self.replay = None
            for ready, phases, label, *_ in plans:
                self.engine.submit(ready, phases, label, lambda t: None, stream=devices)
            self.engine.drain()
        return self.engine.links.link_busy()

    def charge(self, cpu):
        """Add ``{(pool, cores): CPU seconds}`` of gRPC transfers to the step's."""
        accumulate(self.cpu, cpu)

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

    def _cached(self, key, build):
        """What ``build()`` returns for ``key`` under this run's replica classes and overlap, cached on the
        Simulator (which forgets them all past :data:`MAX_PLANS`)."""
        key += (id(self.classes), self.overlap, self.collectives_overlap)
        cached = self.sim.plans.get(key)
        if cached is None or cached[0] is not self.classes:
            cached = self.remember(self.sim.plans, key, (self.classes, build()))
        return cached[1]

    @staticmethod
    def remember(cache, key, value):
        """``cache[key] = value``, the whole cache forgotten first when it holds :data:`MAX_PLANS`."""
        if len(cache) >= MAX_PLANS:
            cache.clear()
        cache[key] = value
        return value

    def end(self):
        """When the step's last compute, transfer or update (on a replica or a PS) has ended."""
        return max(max(self.finish), max(self.upd_free.values(), default=0.0), max(self.ps_free.values(), default=0.0))

