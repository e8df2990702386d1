"""A lower bound on the step time no strategy with the given replicas can beat.

The largest of these terms, each in the simulator's own cost terms so that
a simulated step never falls below it, on the step of one replica's slice
of the global batch (``Problem.at_replicas``; ``m`` micro-batches run the
forward and backward ``m`` times):

- **critical path**: the longest chain of op groups, each at its cheapest
  device model, ``m`` times;
- **total work / devices**: one replica's work at the cheapest model, times
  the replicas, over the devices they use;
- **per-variable sync**: for every variable, the earliest its gradient can
  be ready plus the fastest way to synchronise and apply it alone: the best
  allreduce (on collective ops or the runtime's ordinary ops, of the bytes
  fp16/bf16 compression would send) then the
  update on a replica device, or a PS round: the pushes of the other worker
  tasks queue on the server's port (PS fan-in), the update of the smallest
  shard (the pulls claim nothing: the next step's forward pass may hide
  them until its first read of the variable).  Transfers go between
  distinct devices only (a PS and a worker on one device exchange nothing,
  but with several replicas some gradient must move);
- **link volume**: every byte that crosses a node boundary occupies the
  sending NIC; whichever way each variable is synchronised, the NICs carry
  at least the cheaper method's bytes, so the busiest NIC is busy at least
  the total over the NICs;
- **update work**: a replica device runs the updates of its allreduced
  variables after its compute, and the PS devices those of the others: for
  any ``w`` in [0, 1] the step is at least ``w * (compute + AR updates) +
  (1 - w) * PS updates / servers``, taking each variable's cheaper side.

Transfer time is affine in bytes (latency plus bytes over bandwidth), so
the fastest PS path is bounded from below by the smallest intercept plus
the smallest slope over all paths.
"""

from __future__ import annotations

from autodist.errors import PlacementError
from autodist.strategy import ALLREDUCE_ALGORITHMS

_PROBE_BYTES = 1 << 20
_WEIGHTS = tuple(k / 8 for k in range(9))


def _nic_tx(link):
    """Whether ``link`` is the sending direction of a node's NIC."""
    return "/nic" in link and link.endswith("/tx")


def _representative_nodes(spec):
    """Two nodes of each kind (fabric, NICs, devices): every path kind between them."""
    kinds = {}
    for node in spec.nodes:
        kinds.setdefault(repr((node.fabric, node.nics, [d.kind for d in node.devices])), []).append(node)
    return [n for group in kinds.values() for n in group[:2]]


def _transfer_affine(problem):
    """(smallest intercept, smallest slope, smallest NIC-tx seconds per byte of a cross-node PS transfer).

    Over every transfer a PS round may make between two distinct devices:
    gRPC pushes and pulls, and the local copies inside a task.
    """
    spec, prices = problem.resource_spec, problem.prices
    nodes = _representative_nodes(spec)
    devices = [d.name for n in nodes for d in n.devices]
    servers = [p for p in problem.ps_candidates if p in devices]
    intercept = slope = nic_slope = float("inf")
    for w in devices:
        for p in servers:
            if w == p:
                continue
            for price in (prices.ps_phases, prices.transfer_phases):
                for src, dst in ((w, p), (p, w)):
                    zero, probe = price(src, dst, 0), price(src, dst, _PROBE_BYTES)
                    t0 = sum(ph.seconds for ph in zero)
                    per_byte = max(0.0, sum(ph.seconds for ph in probe) - t0) / _PROBE_BYTES
                    intercept, slope = min(intercept, t0), min(slope, per_byte)
                    if price == prices.ps_phases and spec.device(w).node != spec.device(p).node:
                        nics = sum(_nic_tx(link) for ph in probe for link in ph.links)
                        nic_slope = min(nic_slope, nics * per_byte)
    # with servers but no cross-node pair among the representatives, claim nothing for the NICs
    return intercept, slope, nic_slope if nic_slope < float("inf") else 0.0


def _allreduce_options(problem, devices, nbytes, sending_nics):
    """``(seconds, NIC-tx seconds)`` lower bounds of each way to allreduce ``nbytes`` alone over ``devices``.

    NIC-tx seconds are the bytes' share of the phases' occupancy, times the
    sending NICs each phase holds; the part a fused bucket pays once
    (intercepts, and the per-tensor overhead taken out of the first phase)
    is left out, so the shares of the variables of a bucket never add up to
    more than the bucket's.  ``sending_nics``: a cache of the NIC-tx links of
    each link tuple (a collective over a thousand devices holds thousands).
    """
    out = []
    for algorithm in ALLREDUCE_ALGORITHMS:
        for collective_ops in (True, False):
            try:
                phases = problem.prices.allreduce_phases(devices, algorithm, nbytes, collective_ops)
            except PlacementError:  # an algorithm that cannot run on these devices (hierarchical, uneven nodes)
                continue
            zero = problem.prices.allreduce_phases(devices, algorithm, 0, collective_ops)
            nic = 0.0
            for i, (ph, z) in enumerate(zip(phases, zero)):
                share = ph.seconds - z.seconds
                if i == 0:
                    share -= max(0.0, problem.prices.overhead - z.seconds)
                if ph.links not in sending_nics:
                    sending_nics[ph.links] = sum(_nic_tx(link) for link in ph.links)
                nic += max(0.0, share) * sending_nics[ph.links]
            out.append((sum(p.seconds for p in phases), nic))
    return out


def lower_bound(problem, replicas=None, group_slots=None):
    """Seconds below which no step of a strategy with these replicas can run.

    Parameters
    ----------
    problem : placement.problem.Problem
    replicas : list of list of str, optional
        The strategy's replicas; default one per compute device, at most
        ``problem.max_replicas``.
    group_slots : dict, optional
        The strategy's op group slots (which device of a replica holds each
        variable's gradient).

    Returns
    -------
    float
    """
    spec = problem.resource_spec
    if replicas is None:
        replicas = [[d.name] for d in spec.compute_devices()][:problem.max_replicas]
    problem = problem.at_replicas(len(replicas))
    group_slots = group_slots or {}
    models = {}
    for d in spec.compute_devices():
        models.setdefault(problem.device_model[d.name], d)
    per_model = [problem.device_costs(d)[0] for d in models.values()]
    cheapest = [min(costs[g] for costs in per_model) for g in range(len(problem.groups.groups))]
    micro = problem.micro_batches

    preds = problem.preds
    path = [0.0] * len(cheapest)
    for g, incoming in enumerate(preds):
        path[g] = cheapest[g] + max((path[p] for p, _ in incoming), default=0.0)
    critical = max(path, default=0.0)
    used = {d for r in replicas for d in r}
    one_device = all(len(r) == 1 for r in replicas)
    work = sum(cheapest) * len(replicas) / max(len(used), 1)
    # earliest a group can end: on one device every ancestor runs before it
    before = _ancestor_work(preds, cheapest) if one_device else path
    earlier = (micro - 1) * critical
    terms = [critical * micro, work * micro]
    if len(replicas) > 1 and problem.dense_bytes:
        terms += _sync_terms(problem, replicas, group_slots, models, [earlier + t for t in before],
                             sum(cheapest) * micro if one_device else None)
    return max(terms)


def _sync_terms(problem, replicas, group_slots, models, ready, replica_compute):
    """The per-variable sync, link volume and update work terms (see the module docstring).

    ``replica_compute``: a replica device's compute seconds, None when
    replicas span several devices (their updates then run on several).
    """
    spec = problem.resource_spec
    servers = problem.ps_candidates
    intercept, slope, nic_slope = _transfer_affine(problem) if servers else (float("inf"),) * 3
    replica_updates = [problem.device_costs(d)[1] for d in models.values()]
    server_updates = [problem.device_costs(spec.device(p))[1] for p in servers]
    nics = sum(len(node.nics) for node in spec.nodes)
    sync, nic_seconds, weighted = 0.0, 0.0, [w * (replica_compute or 0.0) for w in _WEIGHTS]
    sending_nics, slot_devices = {}, {}
    for name, nbytes in problem.compressed_bytes.items():  # fp16/bf16 compression sends the fewest bytes
        slot = group_slots.get(problem.var_unit[name], 0)
        if slot not in slot_devices:
            devices = tuple(r[slot] for r in replicas)
            slot_devices[slot] = (devices, len({spec.device(d).node for d in devices}))
        devices, tasks = slot_devices[slot]
        on_replica = min(u[name] for u in replica_updates)
        on_server = min((u[name] for u in server_updates), default=float("inf")) / max(len(servers), 1)
        options = _allreduce_options(problem, devices, nbytes, sending_nics)
        if name in problem.sparse_gradients:  # its rows are all-gathered (no NIC share claimed)
            gather = problem.prices.sparse_allgather_phases(devices, problem.sparse_bytes[name])
            options.append((sum(p.seconds for p in gather), 0.0))
        allreduce = min(seconds for seconds, _ in options) + on_replica
        shard = problem.sparse_bytes[name] / max(len(servers), 1)
        ps = intercept + max(1, tasks - 1) * slope * shard + on_server
        sync = max(sync, ready[problem.groups.gradient_group[name]] + min(allreduce, ps))
        if nics and tasks > 1:
            ps_nic = 2 * (tasks - 1) * problem.sparse_bytes[name] * nic_slope
            nic_seconds += min(min(nic for _, nic in options), ps_nic)
        for k, w in enumerate(_WEIGHTS):
            weighted[k] += min(w * on_replica, (1 - w) * on_server if w < 1 else 0.0)
    return [sync, nic_seconds / nics if nics else 0.0, max(weighted) if replica_compute is not None else 0.0]


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
