"""A lower bound on the step time no strategy with the given replicas can beat.

``max(critical path, total work / devices, sync bound)``, every term in the
simulator's own cost terms so that a simulated step never falls below it:

- critical path: the longest chain of op groups, each at its cheapest
  device model;
- total work / devices: one replica's work at the cheapest model, times the
  replicas, over the devices they use;
- sync bound: for every variable, the earliest its gradient can be ready
  (the critical path to it; with one device per replica, all the work of its
  ancestors, which that device runs first) plus the fastest way to
  synchronise and apply that gradient alone and uncontended: the best
  allreduce algorithm over the replicas, on collective ops or on the
  runtime's ordinary ops, of its bytes as fp16/bf16 compression sends them,
  then the update on a replica device, or a PS push and pull of one shard, over any worker-PS path, for
  up to one shard per PS device, with the server's share of the update.
  Transfer time is affine in bytes (latency plus bytes over bandwidth), so
  the fastest PS path is bounded from below by the smallest intercept plus
  the smallest slope over all paths.
"""

from __future__ import annotations

from autodist.strategy import ALLREDUCE_ALGORITHMS
from placement.baselines import ps_candidates
from placement.simulator import Simulator

_PROBE_BYTES = 1 << 20


def _path_signature(node):
    return repr((node.fabric, node.nics, [d.kind for d in node.devices]))


def _ps_affine(simulator):
    """(smallest intercept, smallest slope) of one PS transfer over all paths."""
    spec = simulator.resource_spec
    comm = simulator.comm
    representatives = {}
    for node in spec.nodes:
        representatives.setdefault(_path_signature(node), []).append(node)
    nodes = [n for group in representatives.values() for n in group[:2]]
    workers = [d.name for n in nodes for d in n.devices]
    servers = [p for p in ps_candidates(spec) if spec.device(p).node in {n.name for n in nodes}]
    intercept, slope = float("inf"), float("inf")
    for w in workers:
        for p in servers:
            for src, dst in ((w, p), (p, w)):
                t0 = sum(ph.seconds for ph in comm.ps_phases(src, dst, 0))
                t1 = sum(ph.seconds for ph in comm.ps_phases(src, dst, _PROBE_BYTES))
                intercept = min(intercept, t0)
                slope = min(slope, max(0.0, (t1 - t0) / _PROBE_BYTES))
    return intercept, slope


def lower_bound(graph_item, resource_spec, cost_model, replicas=None, group_slots=None, simulator=None):
    """Seconds below which no step of a strategy with these replicas can run.

    Parameters
    ----------
    replicas : list of list of str, optional
        The strategy's replicas; default one per compute device.
    group_slots : dict, optional
        The strategy's op group slots (which device of a replica holds each
        variable's gradient).
    simulator : placement.simulator.Simulator, optional
        Reused for its cached costs.

    Returns
    -------
    float
    """
    sim = simulator or Simulator(graph_item, resource_spec, cost_model)
    if replicas is None:
        replicas = [[d.name] for d in resource_spec.compute_devices()]
    sim = sim.at_replicas(len(replicas))
    group_slots = group_slots or {}
    models = {}
    for d in resource_spec.compute_devices():
        models.setdefault(sim._model_key(d), d)
    per_model = [sim.device_costs(d)[0] for d in models.values()]
    cheapest = [min(costs[g] for costs in per_model) for g in range(len(sim.groups.groups))]

    preds = sim.groups.predecessors()
    path = [0.0] * len(cheapest)
    for g, incoming in enumerate(preds):
        path[g] = cheapest[g] + max((path[p] for p, _ in incoming), default=0.0)
    critical = max(path, default=0.0)
    used = {d for r in replicas for d in r}
    work = sum(cheapest) * len(replicas) / max(len(used), 1)
    # earliest a group can end: on one device every ancestor runs before it
    before = _ancestor_work(preds, cheapest) if all(len(r) == 1 for r in replicas) else path

    sync = 0.0
    if len(replicas) > 1 and sim.dense_bytes:
        servers = ps_candidates(resource_spec)
        intercept, slope = _ps_affine(sim) if servers else (float("inf"), 0.0)
        replica_updates = [sim.device_costs(resource_spec.device(r[0]))[1] for r in replicas[:1]]
        replica_updates += [sim.device_costs(d)[1] for d in models.values()]
        server_updates = [sim.device_costs(resource_spec.device(p))[1] for p in servers]
        for name, nbytes in sim.compressed_bytes.items():
            slot = group_slots.get(sim.var_unit[name], 0)
            devices = tuple(r[slot] for r in replicas)
            allreduce = min(
                sum(p.seconds for p in sim.allreduce_phases(devices, a, nbytes, collective_ops))
                for a in ALLREDUCE_ALGORITHMS for collective_ops in (True, False)
            )
            allreduce += min(u[name] for u in replica_updates)
            shard = sim.sparse_bytes[name] / max(len(servers), 1)
            ps = 2 * (intercept + slope * shard) + min((u[name] for u in server_updates), default=0.0) / max(len(servers), 1)
            sync = max(sync, before[sim.groups.gradient_group[name]] + min(allreduce, ps))
    return max(critical, work, sync)


def _ancestor_work(preds, seconds):
    """Per group, the summed seconds of the group and all its ancestors."""
    ancestors = []
    totals = []
    for g, incoming in enumerate(preds):
        mask = 1 << g
        for p, _ in incoming:
            mask |= ancestors[p]
        ancestors.append(mask)
        total, index = 0.0, 0
        while mask:
            if mask & 1:
                total += seconds[index]
            mask >>= 1
            index += 1
        totals.append(total)
    return totals
