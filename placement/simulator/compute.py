"""Compute: one replica's op groups run in dependency order on its devices, activations between them on links."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from placement.simulator.links import LinkQueue


@dataclass
class Schedule:
    """The compute schedule of one replica class (slot-indexed)."""

    end: float
    slot_end: dict
    slot_busy: dict
    gradient_ready: dict
    pull_needed: dict  # variable -> when its first reader starts (first micro-batch): its pull may come that late
    events: list
    cpu: dict  # (pool, cores) -> CPU seconds of its activations' gRPC tensor ends between tasks (Problem.grpc_cpu)


def run_compute(problem, link_sets, replica, slots, trace, micro_batches, pace):
    """One replica's compute schedule (``replica``: its device names, ``slots``: the slot of
    every unit); every group takes ``pace`` times its cost (the slowest replica's)."""
    devices = [problem.resource_spec.device(d) for d in replica]
    groups = problem.groups.groups
    n = len(groups)
    costs = [[pace * c for c in problem.device_costs(d)[0]] for d in devices]
    slot_of = [slots[problem.group_unit[g]] if len(replica) > 1 else 0 for g in range(n)]
    remaining = [len(p) for p in problem.preds]
    succs = problem.groups.successors()
    ready_at = [0.0] * n
    began = [0.0] * n
    end = [0.0] * n
    free = {}
    busy = {}
    links = LinkQueue(link_sets)
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
                phases = problem.prices.phase_list(("xfer", src, dst, nbytes),
                                                 lambda: problem.prices.transfer_phases(src, dst, nbytes))
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
    gradient_ready = {v: earlier + end[g] for v, g in problem.groups.gradient_group.items()}
    pull_needed = {v: began[g] for v, g in problem.groups.read_group.items()}
    if earlier:
        free = {slot: earlier + t for slot, t in free.items()}
        busy = {slot: t * micro_batches for slot, t in busy.items()}
        events = [(name, kind, where, earlier + a, earlier + b) for name, kind, where, a, b in events]
        label = f"micro-batches 1-{micro_batches - 1}"
        events += [(label, "compute", d, 0.0, earlier) for d in replica]
    return Schedule(earlier + one, free, busy, gradient_ready, pull_needed, events,
                     problem.grpc_cpu(between_tasks))

