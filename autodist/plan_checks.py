"""The invariants of a Plan document, beyond its JSON Schema.

A plan may come from another tool or a text editor, so :class:`autodist.plan.Plan`
checks, before anything uses it: tasks on the cluster's nodes with its
devices, numbered from 0 per job; replicas that are disjoint and run on
worker tasks; one PS task per PS device; every variable synchronised exactly
once, as the strategy says; buckets that hold exactly their allreduced
variables and their bytes; device assignments and op groups that follow from
the tasks and the strategy.
"""

from __future__ import annotations

from collections import Counter

from autodist.plan_layout import JOBS, device_assignments


def plan_problems(data, resource_spec, strategy):
    """``(field, message)`` for every broken invariant of a plan document, first to last.

    Parameters
    ----------
    data : dict
        The plan document (schema-valid).
    resource_spec : ResourceSpec
        Its ``cluster``.
    strategy : Strategy
        Its ``strategy``.
    """
    devices = {d.name for d in resource_spec.devices()}
    yield from _task_problems(data["tasks"], resource_spec, devices)
    names = [v["name"] for v in data["variables"]]
    for name, count in sorted(Counter(names).items()):
        if count > 1:
            yield "variables", f"variable {name!r} is listed {count} times; each is synchronised exactly once"
    if len(names) != data["graph"]["trainable_variables"]:
        yield "variables", f"{len(names)} variables, but the graph has {data['graph']['trainable_variables']} trainable ones"
    yield from strategy.problems(devices, set(names))
    yield from _placement_problems(data, resource_spec, strategy)
    yield from _variable_problems(data["variables"], strategy)
    yield from _bucket_problems(data["collectives"]["buckets"], data["variables"], strategy)


def _task_problems(tasks, resource_spec, devices):
    nodes = {n.name for n in resource_spec.nodes}
    owner = {}
    for i, task in enumerate(tasks):
        if task["node"] not in nodes:
            yield f"tasks[{i}].node", f"node {task['node']!r} is not in the plan's cluster"
            continue
        for j, dev in enumerate(task["devices"]):
            field = f"tasks[{i}].devices[{j}]"
            key = (task["job"], dev)
            if dev not in devices:
                yield field, f"device {dev!r} is not in the plan's cluster"
            elif resource_spec.device(dev).node != task["node"]:
                yield field, f"device {dev!r} is not on the task's node {task['node']!r}"
            elif key in owner:
                yield field, f"device {dev!r} already belongs to {task['job']} task {owner[key]}"
            owner[key] = task["index"]
    for job in JOBS:
        indices = [t["index"] for t in tasks if t["job"] == job]
        if indices != list(range(len(indices))):
            yield "tasks", f"{job} task indices are {indices}, expected 0..{len(indices) - 1}"
    if not any(t["job"] == "worker" for t in tasks):
        yield "tasks", "no worker task"


def _placement_problems(data, resource_spec, strategy):
    """Replicas on worker tasks, PS devices on PS tasks, assignments and op groups as the tasks say."""
    worker_devices = {d for t in data["tasks"] if t["job"] == "worker" for d in t["devices"]}
    for r, replica in enumerate(strategy.replicas):
        for j, dev in enumerate(replica):
            if dev not in worker_devices:
                yield f"strategy.replicas[{r}][{j}]", f"device {dev!r} belongs to no worker task"
    ps_tasks = [t["devices"] for t in data["tasks"] if t["job"] == "ps"]
    if ps_tasks != [[dev] for dev in strategy.ps_devices]:
        yield "tasks", f"PS tasks hold {ps_tasks}, but the strategy's PS devices are {strategy.ps_devices}"
    if data["device_assignments"] != device_assignments(data["tasks"], resource_spec):
        yield "device_assignments", "do not follow from the tasks (devices of one kind are numbered from 0 per task)"
    if data["op_groups"] != {g: strategy.devices_of(g) for g in sorted(strategy.group_slots)}:
        yield "op_groups", "do not follow from strategy.group_slots and strategy.replicas"


def _variable_problems(entries, strategy):
    for i, entry in enumerate(entries):
        sync = strategy.sync.get(entry["name"])
        if sync is None:
            continue  # reported by Strategy.problems
        field = f"variables[{i}]"
        if entry["method"] != sync.method:
            yield f"{field}.method", f"{entry['method']!r}, but the strategy synchronises it by {sync.method!r}"
        elif sync.method == "ps":
            shards = [(s["ps_task"], s["device"]) for s in entry.get("shards", [])]
            expected = [(t, strategy.ps_devices[t]) for t in sync.ps_tasks]
            if shards != expected:
                yield f"{field}.shards", f"(task, device) {shards}, but the strategy says {expected}"
        elif (entry.get("algorithm"), entry.get("bucket")) != (sync.algorithm, sync.bucket):
            yield field, (f"algorithm {entry.get('algorithm')!r} bucket {entry.get('bucket')!r}, "
                          f"but the strategy says {sync.algorithm!r} bucket {sync.bucket!r}")


def _bucket_problems(buckets, entries, strategy):
    """Each listed collective is one CollectiveKey of the strategy's (bucket, wire format, algorithm), with
    exactly its variables and their bytes."""
    from autodist.strategy import CollectiveKey

    sizes = {e["name"]: e["bytes"] for e in entries}
    expected = strategy.collectives()
    seen = {}
    for i, bucket in enumerate(buckets):
        field = f"collectives.buckets[{i}]"
        key = CollectiveKey(bucket["bucket"], 0, bucket.get("compression", "none"), bucket.get("algorithm", "ring"))
        if key in seen:
            yield f"{field}.bucket", f"bucket {bucket['bucket']} is listed twice"
        seen[key] = bucket["variables"]
        for var in bucket["variables"]:
            sync = strategy.sync.get(var)
            if sync is None or sync.method != "allreduce" or CollectiveKey.of(sync) != key:
                where = ("is not allreduced" if sync is None or sync.method != "allreduce"
                         else f"is in bucket {sync.bucket} ({sync.algorithm}, {sync.compression})")
                yield f"{field}.variables", f"variable {var!r} {where} in the strategy"
        total = sum(sizes.get(v, 0) for v in bucket["variables"])
        if bucket["bytes"] != total:
            yield f"{field}.bytes", f"{bucket['bytes']}, but its variables hold {total} bytes"
    for key, names in expected.items():
        if sorted(seen.get(key, [])) != names:
            yield "collectives.buckets", f"bucket {key.bucket} ({key.algorithm}, {key.compression}) should hold exactly {names}"
