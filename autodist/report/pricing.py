"""The report's one door to the simulator and the transfer model.

Counterfactuals, the exposed-time split and the latency test all price
strategies here, so that a change in how placement evaluates a strategy is
adapted in this module alone.
"""

from __future__ import annotations


class Pricing:
    """Prices strategies of one job on one cluster.

    Parameters
    ----------
    graph_item : autodist.graph.item.GraphItem
    resource_spec : autodist.resource_spec.ResourceSpec
    cost_model : cost_models.CostModel
    simulator : placement.Simulator, optional
        A search's simulator (``SearchResult.simulator``), reused with its
        Problem and caches when it is of this job, cluster and cost model.
    """

    def __init__(self, graph_item, resource_spec, cost_model, simulator=None):
        from placement import Problem, Simulator

        if simulator is None or not _is_of(simulator.problem, graph_item, resource_spec, cost_model):
            simulator = Simulator(Problem(graph_item, resource_spec, cost_model))
        self._problem = simulator.problem
        self._simulator = simulator
        self.resource_spec = resource_spec
        self.dense_bytes = dict(self._problem.dense_bytes)
        self.sparse_gradients = set(self._problem.sparse_gradients)
        # Why no plan with PS can run the job (None where one can: JobInfo.why_collective_only).
        self.ps_not_offered = graph_item.job.why_collective_only()
        self._alone = {}  # replica devices -> one of them running one replica's share alone

    def weak_scaling(self, strategy, samples_per_s):
        """The weak scaling of ``strategy`` at ``samples_per_s`` over one of its devices running one replica's
        share alone (placement.scaling); None unless every replica is one device, of one model, and there are
        at least two."""
        from placement.scaling import one_device, weak_scaling

        if not all(len(replica) == 1 for replica in strategy.replicas):
            return None
        devices = tuple(replica[0] for replica in strategy.replicas)
        if devices not in self._alone:
            self._alone[devices] = one_device(self._problem, list(devices))
        return weak_scaling(self._alone[devices], samples_per_s)

    def simulate(self, strategy, trace=False):
        """The SimResult of one step of ``strategy`` (``trace``: keep its timeline events)."""
        return self._simulator.simulate(strategy, trace=trace)

    def sparse_bytes(self, strategy):
        """Gradient bytes per variable of one replica of ``strategy``: the rows its slice of the batch touches
        for a sparse gradient, else the whole gradient."""
        return self._problem.at_replicas(len(strategy.replicas), self._problem.micro_batches_of(strategy)).sparse_bytes

    def ps_candidates(self):
        """Where PS tasks may live, as the baselines place them."""
        return list(self._problem.ps_candidates)

    def slot_of(self, strategy, name):
        """The replica slot whose device holds variable ``name``."""
        return strategy.group_slots.get(self._problem.var_unit[name], 0)

    def buckets(self, strategy):
        """The fused collectives of ``strategy``: ``{CollectiveKey: [variables]}`` (Strategy.collectives), as
        simulated: on the replicas' first devices, where the runtimes hold allreduced variables."""
        return strategy.collectives()

    def transfer_terms(self, strategy):
        """``(latency, bandwidth)``: the transfer model's seconds of every transfer of ``strategy``'s
        synchronisation, split into the part a transfer pays at any size (link latency, per-tensor and
        per-collective overhead) and the part its bytes add."""
        problem = self._problem
        priced = []  # (phases at 0 bytes, phases at the real bytes)
        sparse_bytes = self.sparse_bytes(strategy)
        collective_ops = strategy.allreduces_everything()
        for key, names in self.buckets(strategy).items():
            algorithm, devices = key.algorithm, tuple(r[key.slot] for r in strategy.replicas)
            # as simulated: a sparse gradient's rows are all-gathered after the bucket's sum
            gathered = self._problem.gathered(strategy, names) if len(devices) > 1 else ()
            wire = self.dense_bytes if key.compression == "none" else problem.compressed_bytes
            nbytes = sum(wire[v] for v in names if v not in gathered)
            if len(gathered) < len(names):
                priced.append([problem.prices.allreduce_phases(devices, algorithm, n, collective_ops) for n in (0, nbytes)])
            priced += [[problem.prices.sparse_allgather_phases(devices, n) for n in (0, sparse_bytes[v])] for v in gathered]
        for name, s in sorted(strategy.sync.items()):
            if s.method != "ps":
                continue
            slot = self.slot_of(strategy, name)
            nbytes = -(-sparse_bytes[name] // s.shards)
            workers = {}  # node -> the devices of its task; the first pushes and pulls for all
            for replica in strategy.replicas:
                workers.setdefault(self.resource_spec.device(replica[slot]).node, []).append(replica[slot])
            for task in s.ps_tasks:
                ps = strategy.ps_devices[task]
                for devices in workers.values():
                    # A sparse gradient is summed by concatenating the task's replicas' rows.
                    pushed = nbytes * len(devices) if name in self.sparse_gradients else nbytes
                    priced.append([problem.prices.ps_phases(devices[0], ps, n) for n in (0, pushed)])
                    priced.append([problem.prices.ps_phases(ps, devices[0], n) for n in (0, nbytes)])
        latency = sum(p.seconds for empty, _ in priced for p in empty)
        total = sum(p.seconds for _, full in priced for p in full)
        return latency, max(total - latency, 0.0)


def _is_of(problem, graph_item, resource_spec, cost_model):
    """Whether ``problem`` was built from these very objects."""
    return (problem.graph_item is graph_item and problem.resource_spec is resource_spec
            and problem.cost_model is cost_model)
