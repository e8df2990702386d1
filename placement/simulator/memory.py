"""Memory: the peak bytes each device of a strategy holds."""

from __future__ import annotations


def memory_of(problem, strategy, slots, var_slot, whole):
    """Peak bytes per device (see cost_models.memory).

    A replica's first device holds every allreduce variable, with its
    optimizer slots (and an accumulation buffer when the step accumulates
    micro-batches), as the runtimes hold them (launcher.runtime.layout);
    a replica device holds, for PS variables of its groups, its local copy
    of what it reads; and the peak of the live tensors of the ops of its
    groups (gradients included, until their update).  A PS device holds
    its shards of the variables and of their slots.  ``var_slot``: each variable's slot (None: all on
    slot 0); ``whole``: each variable's bytes with its optimizer slots.
    """
    dense, sparse = problem.dense_bytes, problem.sparse_bytes
    persistent, accumulated, ps_bytes = {}, {}, {}
    for name, s in strategy.sync.items():
        if s.method == "allreduce":
            slot, held = 0, whole[name]
            accumulated[0] = accumulated.get(0, 0) + dense[name]
        else:
            slot, held = (var_slot[name] if var_slot else 0), sparse[name]
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
