"""The simulator: lowers a strategy to its step graph (placement.simulator.taskgraph) and runs it."""

from __future__ import annotations

from cost_models.overlap import contention_delay
from placement.problem import Problem
from placement.simulator import run as run_module
from placement.simulator.compute import run_compute
from placement.simulator.memory import memory_of
from placement.simulator.ps import GaveUp
from placement.simulator.result import Expanded, SimResult
from placement.simulator.run import SyncRun
from placement.simulator.stream import StreamLog
from placement.simulator.taskgraph import Lowering


class Simulator:
    """Evaluates strategies of one :class:`~placement.problem.Problem`, caching compute schedules.

    Parameters
    ----------
    problem : placement.problem.Problem
    incremental : bool
        Evaluate each strategy from the one before it (placement.simulator.taskgraph.Lowering,
        placement.simulator.stream): False evaluates each in full, with the same results.
    horovod : bool
        Price the collectives of a plan on collective ops as Horovod's fused collectives: each pays Horovod's
        fixed cost per collective (cost_models.overlap), which autodist's runtime does not.  The reference the
        published multi-GPU runs are priced as (placement.baselines.horovod_step).
    tower_ps : bool
        Price PS variables as TensorFlow 1's between-graph replication moves them: every replica (a "tower")
        pushes its own gradient to the variable's PS and reads the variable from it itself, with no sum inside
        its node, which autodist's runtime makes.  The reference the published distributed-TensorFlow runs are
        priced as (placement.baselines.tensorflow_ps_step).
    proxy_pulls : bool
        Price PS pulls as AutoDist's (petuum/autodist) local proxy variables run them: each task's proxy of a
        shard is refreshed as soon as the shard's update ends, inside the step, where autodist's runtime reads
        every PS variable at the next step's start.  The reference AutoDist's published runs are priced as
        (placement.baselines.autodist_ps_step).
    ring_reduce : bool
        Price the collectives of a plan on collective ops as TensorFlow's own ring implementation runs them
        (``RingReduce``: its chunks moved over gRPC between workers and copied inside one, as ordinary ops move
        them, ``CommModel.graph_allreduce_phases``), where autodist's runtime asks for NCCL.  What a
        ``MultiWorkerMirroredStrategy`` with its default communication runs (placement.baselines.mwms_step).
    """

    def __init__(self, problem, incremental=True, horovod=False, tower_ps=False, proxy_pulls=False,
                 ring_reduce=False):
        self.problem = problem
        self.incremental = incremental
        self.horovod = horovod
        self.tower_ps = tower_ps
        self.proxy_pulls = proxy_pulls
        self.ring_reduce = ring_reduce
        self.lowering = Lowering(self, incremental)
        self._shares = {}  # the simulators of the problem's replica shares (Problem.at_replicas)
        self._schedules = {}
        self._classes = {}
        self._memory = {}  # what Simulator.memory depends on -> (replica list, peak bytes per device)
        self.link_sets = ({}, {})  # see LinkQueue
        # what one bucket or one PS variable costs under the replica classes it is simulated with (see SyncRun)
        self.plans = {}
        self.stream_log = StreamLog()  # the last stream run (placement.simulator.stream)
        self.collective_plans = {}  # the same, by the identity of a lowered collective (SyncRun.collective_plan)
        self._whole_bytes = {name: nbytes + problem.slot_bytes[name] for name, nbytes in problem.dense_bytes.items()}

    def _share(self, strategy):
        """The simulator of ``strategy``'s part of the batch (one micro-batch of one replica's slice): this one
        where that is the whole captured batch."""
        problem = self.problem.at_replicas(len(strategy.replicas), self.problem.micro_batches_of(strategy),
                                           one_client=not strategy.allreduces_everything())
        if problem is self.problem:
            return self
        if id(problem) not in self._shares:
            self._shares[id(problem)] = Simulator(problem, self.incremental, self.horovod, self.tower_ps,
                                                    self.proxy_pulls, self.ring_reduce)
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
        schedule = run_compute(self.problem, self.link_sets, replica, slots, trace, micro_batches, pace)
        self._schedules[key] = schedule
        return schedule

    # -- one step ----------------------------------------------------------
    def lower(self, strategy, trace=False):
        """The step graph of ``strategy`` (placement.simulator.taskgraph.StepGraph), on its share of the batch."""
        share = self._share(strategy)
        if share is not self:
            return share.lower(strategy, trace)
        return self._lower(strategy, trace)

    def _lower(self, strategy, trace):
        slots = self._slots(strategy)
        classes = self._replica_classes(strategy.replicas, slots, trace, self.problem.micro_batches_of(strategy))
        return self.lowering.lower(strategy, classes, self._var_slots(strategy))

    def simulate(self, strategy, trace=False, overlap=True, give_up=None):
        """Simulate one step of ``strategy``: lower it (:meth:`lower`), then run its graph.

        Parameters
        ----------
        strategy : autodist.strategy.Strategy
        trace : bool
            Keep the timeline events (autodist.report.timeline writes them as a Chrome trace).
        overlap : bool
            If False, synchronisation waits for the end of compute (a what-if
            that shows how much overlap gains).
        give_up : callable, optional
            Called once, before a one-client plan's pulls, with a time the step
            takes at least; where it returns True the run stops there (a
            search that would reject the strategy at that time anyway).

        Returns
        -------
        SimResult, or None where ``give_up`` stopped the run
        """
        share = self._share(strategy)
        if share is not self:
            return share.simulate(strategy, trace, overlap, give_up)
        graph = self._lower(strategy, trace)
        classes = graph.classes
        run = SyncRun(self, strategy, classes, trace, overlap,
                      overlap and self.problem.overlaps_compute(strategy.replicas), graph.collective_ops, give_up)
        try:
            run.execute(graph)
        except GaveUp:
            return None

        compute_time = run.finish[0]
        client_time = graph.client_time
        step_time = client_time + run.end()
        step_time += (contention_delay(compute_time, run.engine.collective_spans) + run.update_contention()
                      + run.compute_delay())
        cpu_bound = () if graph.collective_ops else self._cpu_floor(strategy, run)
        if cpu_bound and cpu_bound[1] > step_time:
            step_time = cpu_bound[1]
        else:
            cpu_bound = ()
        memory = self._cached_memory(strategy, self._slots(strategy))
        events = run.events
        if trace:
            for schedule, _ in classes:
                events.extend(schedule.events)
            if client_time:  # the loop that drives the step runs before any of it
                events = [(n, c, r, start + client_time, end + client_time) for n, c, r, start, end in events]
                loop = ("each replica's own loop" if graph.collective_ops
                        else "dispatch the step to every task")
                events.append((loop, "client", "client", 0.0, client_time))
        return SimResult(
            step_time=step_time,
            compute_time=compute_time,
            exposed_comm_time=max(0.0, step_time - compute_time - client_time),
            link_busy=Expanded(run.link_busy),
            device_busy=Expanded(run.device_busy),
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
        return self._cached_memory(strategy, self._slots(strategy) if slots is None else slots)

    def _cached_memory(self, strategy, slots):
        # what the memory depends on: replicas, slots, micro-batches, and which variables go to which PS task
        key = (id(strategy.replicas), slots, self.problem.micro_batches_of(strategy), tuple(strategy.ps_devices),
               tuple((name, s.ps_tasks) for name, s in strategy.sync.items() if s.method != "allreduce"))
        cached = self._memory.get(key)
        if cached is None or cached[0] is not strategy.replicas:
            if len(self._memory) >= run_module.MAX_PLANS:
                self._memory.clear()
            cached = self._memory[key] = (strategy.replicas, memory_of(self.problem, strategy, slots,
                                                                       self._var_slots(strategy), self._whole_bytes))
        return dict(cached[1])

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

    def slot_devices(self, replicas, slot):
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
        With its timeline (autodist.report.timeline.chrome_trace writes it).
    """
    return Simulator(Problem(graph_item, resource_spec, cost_model)).simulate(strategy, trace=True, overlap=overlap)
