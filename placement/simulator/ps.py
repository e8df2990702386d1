"""Parameter-server accounting: pushes in turns, the PS's updates, the next step's pulls and input feeds."""

from __future__ import annotations

from placement.simulator.cpu import accumulate, add_share, transfer_cpu
from placement.simulator.links import WIDE_PHASE

# How much below the step time :meth:`ParameterServerSync._pull_bound` is kept (its busy seconds are summed in
# another order than the run's).
BOUND_MARGIN = 1e-9


class GaveUp(Exception):
    """A run stopped before its pulls: its step would take longer than its ``give_up`` allows (see SyncRun)."""


class ParameterServerSync:
    """The PS half of :class:`~placement.simulator.run.SyncRun` (which holds the state it reads)."""

    # -- parameter servers -------------------------------------------------
    def _workers(self, c, slot):
        """Class ``c``'s devices at ``slot``, per worker task (one per node): a tuple each, in node order; one
        task per device where the Simulator prices TensorFlow 1's towers (``Simulator.tower_ps``)."""
        if self.sim.tower_ps:
            return self._cached(("towers", c, slot), lambda: [(r[slot],) for r in self.classes[c][1]])
        return self._cached(("workers", c, slot), lambda: self._group_by_node(c, slot))

    def _group_by_node(self, c, slot):
        spec = self.problem.resource_spec
        by_node = {}
        for r in self.classes[c][1]:
            by_node.setdefault(spec.device(r[slot]).node, []).append(r[slot])
        return [tuple(devs) for _, devs in sorted(by_node.items())]

    def parameter_server(self, name, slot):
        """Every task sums its replicas' gradient of each shard and pushes it once, in turns; the PS updates
        the shard; the pulls wait for :meth:`pull`, or, where the Simulator prices proxies
        (``Simulator.proxy_pulls``), start when the shard's update ends (:meth:`_proxy_pulls`).  What each
        shard costs is the Simulator's to cache (:meth:`_shard_plans`)."""
        s = self.strategy.sync[name]
        devices = tuple(self.strategy.ps_devices[task] for task in s.ps_tasks)
        plans = self._cached((name, s.shards, devices, slot), lambda: self._shard_plans(name, s.shards, devices, slot))
        requests = []
        for i, (ps_device, pushes, pulls, cost, labels, cpu, beside) in enumerate(plans):
            self.charge(cpu)
            accumulate(self.beside_compute, beside)
            then = self._proxy_pulls(pulls, labels[2]) if self.sim.proxy_pulls else None
            pushed = self._after_pushes(len(pushes), ps_device, cost, labels[1], then)
            requests += [(turn, i, ready, phases, labels[0], pushed) for turn, ready, phases in pushes]
            if then is None:
                self.pulls += [(turn, len(self.pulls), phases, labels[2], needed, cpu)
                               for turn, phases, needed, cpu in pulls]
        for _, _, ready, phases, label, pushed in sorted(requests, key=lambda r: r[:2]):
            self.engine.submit(ready, phases, label, pushed)

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
        if self.give_up is not None and self.give_up(self._pull_bound(start)):
            raise GaveUp
        one_core = self.one_core
        arrivals = []  # (arrival, CPU) of each pull, on one-core replicas

        def arrived(t, needed, cpu):
            self.finish.append(max(start, t - needed))
            if one_core:
                arrivals.append((t, cpu))

        for _, _, phases, label, needed, cpu in sorted(self.pulls, key=lambda p: p[:2]):
            self.engine.submit(start, phases, label, lambda t, needed=needed, cpu=cpu: arrived(t, needed, cpu))
        self.engine.drain()
        self.finish.append(max(self.engine.links.narrow_busy.values(), default=0.0))
        computing = self.end()
        for t, cpu in arrivals:
            if t > computing:
                add_share(self.beside_compute, cpu, t - computing)

    def _pull_bound(self, start):
        """At most the step time, before the pulls are run: the client's dispatch, then the later of ``start`` and
        the busiest narrow link once it has carried the pulls too (every link carries its phases one at a time;
        :meth:`pull` ends the step no sooner), less a margin for the order the busy seconds are summed in."""
        busy = dict(self.engine.links.narrow_busy)
        for pull in self.pulls:
            for _, occupancy, links in pull[2]:
                if occupancy > 0 and len(links) < WIDE_PHASE:
                    for link in links:
                        busy[link] = busy.get(link, 0.0) + occupancy
        return (self.client_time + max(start, max(busy.values(), default=0.0))) * (1.0 - BOUND_MARGIN)

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
                    add_share(beside, transfer_cpu(problem, messages[-1], phases), schedule.end - ready)
                # every replica gathers its own rows of a sparse shard on the PS (launcher.runtime.trainer._gather_rows)
                for d in devs if sparse else devs[:1]:
                    phases = self._ps_transfer(ps_device, d, nbytes)
                    phases = phases if sparse else phases + self._local_copies(devs, nbytes, inward=False)
                    messages.append((ps_device, d, nbytes, 1))
                    pulls.append((self._turn(ps_device, d), phases, needed,
                                  transfer_cpu(problem, messages[-1], phases) if one_core else {}))
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
        return problem.prices.phase_list(("ps", src, dst, nbytes), lambda: problem.prices.ps_phases(src, dst, nbytes))

    def _local_copies(self, devs, nbytes, inward):
        """A task's ``nbytes`` from each of its other replica devices into its first one (``inward``), or back out."""
        if len(devs) < 2:
            return []
        problem, hub, other = self.problem, devs[0], devs[1]
        src, dst = (other, hub) if inward else (hub, other)
        copies = len(devs) - 1
        return problem.prices.phase_list(("local", src, dst, nbytes, copies),
                                  lambda: problem.prices.transfer_phases(src, dst, nbytes), copies)

    def _proxy_pulls(self, pulls, label):
        """The callback that, when a shard's update ends, refreshes every task's proxy of it: its pulls, in turn
        order, inside this step, which ends no sooner than they do (the next step reads the proxies)."""

        def refresh(t):
            for _, phases, _, _ in sorted(pulls, key=lambda p: p[0]):
                self.engine.submit(t, phases, label, self.finish.append)

        return refresh

    def _after_pushes(self, pending, ps_device, cost, label, then=None):
        """The callback that, at the last push of a shard, updates it (and calls ``then`` with when it ends)."""
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
            if then is not None:
                then(stop)

        return pushed

