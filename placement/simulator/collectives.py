"""Allreduce accounting: a fused bucket as one collective (or ordinary ops over gRPC), then its updates."""

from __future__ import annotations

# Bytes of the step outputs that every replica on collective ops averages with the others each step: the loss as
# one float64 (each compiled metric adds 8 more, all far below the sizes whose time differs from a collective's
# fixed cost).
STEP_OUTPUT_BYTES = 8
OUTPUTS_LABEL = "average the step's outputs"  # that collective's events in a traced step


class CollectiveSync:
    """The allreduce half of :class:`~placement.simulator.run.SyncRun` (which holds the state it reads)."""

    # -- allreduce ---------------------------------------------------------
    def allreduce(self, collective):
        """One fused collective (a :class:`~placement.simulator.taskgraph.Collective`) once the bucket's last
        gradient is ready, then the updates.

        A compressed bucket moves its wire bytes; its cast before the
        collective and back after runs on the slowest replica device.
        Its sparse gradients ``gathered`` have their rows all-gathered after
        the bucket's sum (every replica then updates the rows of all:
        launcher.runtime.collective and the one-client runtime); the others
        are summed as dense tensors.
        """
        # NCCL runs a group's collectives on one stream; ordinary ops summing separate buckets do not wait for
        # each other.
        self.submit_plan(self.collective_plan(collective), collective.devices if self.collective_ops
                         else (collective.devices, collective.key.bucket))

    def submit_plan(self, plan, stream):
        """Queue one priced collective (a :meth:`collective_plan` tuple) on ``stream``, its updates after it."""
        ready, phases, label, cast, updates, update_label, contention, cpu = plan
        self.charge(cpu)
        self.engine.submit(ready, phases, label, lambda t: self._apply(t + cast, updates, update_label),
                           stream=stream, contention=contention)

    def outputs_plan(self, graph):
        """The collective that averages the step's outputs over the replicas, as a :meth:`collective_plan` tuple
        (no updates); None where autodist's runtime does not run the step (one replica, a one-client plan, the
        Horovod and MultiWorkerMirroredStrategy references: placement.baselines).

        On collective ops every replica returns its step's loss and metrics averaged over all of them
        (launcher.runtime.collective, ``CollectiveGroup._averaged``): one more ``CollectiveReduceV2`` of a few
        float64 scalars each step, whose fixed cost is its price (a tiny collective over emu-10gbit:2 took
        0.6-0.9 ms, about what small_cnn's step at batch 2 lost to it there: 4.18 against 3.32-3.39 ms
        without it).  Its inputs are ready once the forward pass has computed the loss, before the first
        gradient (where collectives overlap the compute; else, as they do, at the end of the compute).
        """
        if not graph.collective_ops or self.sim.horovod or self.sim.ring_reduce or len(self.strategy.replicas) < 2:
            return None
        devices = self.sim.slot_devices(self.strategy.replicas, 0)
        return self._cached(("outputs", devices), lambda: self._outputs_plan(devices))

    def _outputs_plan(self, devices):
        ready = max(min(schedule.gradient_ready.values(), default=schedule.end) if self.collectives_overlap
                    else schedule.end for schedule, _ in self.classes)
        phases = self._allreduce_phases(devices, "ring", STEP_OUTPUT_BYTES, True, False)
        return ready, phases, OUTPUTS_LABEL, 0.0, [], "", self._contention(devices, STEP_OUTPUT_BYTES, phases), {}

    def _allreduce_phases(self, devices, algorithm, nbytes, nccl, horovod):
        """One allreduce's phases as PhasePrices prices them, kept in its phase lists."""
        prices = self.problem.prices
        return prices.phase_list(("ar", devices, algorithm, nbytes, nccl, horovod),
                                 lambda: prices.allreduce_phases(devices, algorithm, nbytes, nccl, horovod))

    def _contention(self, devices, nbytes, phases):
        """What a collective on collective ops of ``nbytes`` priced as ``phases`` takes from the compute beside it."""
        return self.problem.comm.compute_contention(
            devices, nbytes=nbytes, seconds=sum(latency + occupancy for latency, occupancy, _ in phases))

    def collective_plan(self, collective):
        """What ``collective`` costs (:meth:`_bucket_plan`), the Simulator's to cache: by the collective's identity
        (a lowering keeps the collectives a move left alone), else by what it is."""
        key = (id(collective), id(self.classes), self.overlap, self.collectives_overlap, self.collective_ops)
        by_identity = self.sim.collective_plans
        hit = by_identity.get(key)
        if hit is not None and hit[0] is collective and hit[1] is self.classes:
            return hit[2]
        k = collective.key
        args = (k.algorithm, k.bucket, k.slot, collective.variables, collective.devices, k.compression,
                collective.gathered)
        plan = self._cached(args + (self.collective_ops,), lambda: self._bucket_plan(*args))
        self.remember(by_identity, key, (collective, self.classes, plan))
        return plan

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
        horovod = self.sim.horovod and collective_ops
        nccl = collective_ops and not self.sim.ring_reduce  # TensorFlow's ring moves chunks as ordinary ops do
        phases = self._allreduce_phases(devices, algorithm, nbytes, nccl, horovod) if summed else []
        for i, v in enumerate(gathered):
            # Horovod fuses the bucket's gathers, ready together, into one collective: one fixed cost (the first's).
            rows, fused_head = problem.sparse_bytes[v], horovod and i == 0
            phases = phases + problem.prices.phase_list(
                ("ag", devices, rows, fused_head),
                lambda: problem.prices.sparse_allgather_phases(devices, rows, fused_head))
        label = f"allreduce {algorithm} bucket {bucket}" + (f" {compression}" if compression != "none" else "")
        updates = []
        for c, (_, members) in enumerate(self.classes):
            device = members[0][slot]
            costs = problem.device_costs(problem.resource_spec.device(device))[1]
            updates.append(((c, slot), device, sum(self._update_seconds(costs, v, device, gathered, len(devices))
                                                   for v in names)))
        contention, cpu = None, {}
        if nccl and phases:
            contention = self._contention(devices, nbytes, phases)
        elif phases and problem.core_pools:  # a gRPC sum (ordinary ops, or TensorFlow's ring), every replica's rows
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
        self.finish.append(t)  # the step ends no sooner than its collective (the outputs' updates nothing)
        for key, device, seconds in updates:
            start = max(t, self.upd_free.get(key, 0.0))  # a slot that computes nothing is free from the start
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
        if not self.cpu_updates or not self.engine.collective_spans:
            return 0.0
        lost = sum(share * max(0.0, min(end, stop) - max(begin, start))
                   for begin, end, share in self.engine.collective_spans for start, stop in self.cpu_updates)
        return max(0.0, max(stop for _, stop in self.cpu_updates) + lost - self.end())

