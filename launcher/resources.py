"""CPU and memory of every pod: from the cluster spec unless the user says.

A pod with requests is not the first evicted (BestEffort), and namespaces
with a ResourceQuota or LimitRange admit it.  Limits equal requests: a task
keeps what it was promised and cannot take a neighbour's memory.

- memory: :data:`HOST_MEMORY_SHARE` of the node's host memory (its CPU
  devices' memory in the cluster spec), split evenly between the plan's
  tasks on that node, in whole GiB; the smallest share over the nodes a
  replica template serves.
- CPU: :data:`CPUS_PER_DEVICE` for each device the task holds (the cluster
  spec has no core counts).
"""

from __future__ import annotations

import collections
import decimal

from autodist.errors import LaunchError

GIB = 2**30
# Left for the kubelet, system daemons and the page cache: a fifth of host memory.
HOST_MEMORY_SHARE = 0.8
# Input pipeline and TensorFlow's inter-op threads per GPU (or CPU replica).
CPUS_PER_DEVICE = 4
# Binary and decimal suffixes of Kubernetes quantities.
SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "m": decimal.Decimal("0.001"),
            "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def quantity_value(text):
    """A (checked) Kubernetes quantity as a number: ``"16Gi"`` -> 17179869184."""
    for suffix in sorted(SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            return decimal.Decimal(text[: -len(suffix)]) * SUFFIXES[suffix]
    return decimal.Decimal(text)


def _memory_share(plan, node_name):
    spec = plan.resource_spec
    host = sum(d.memory_bytes for d in spec.node(node_name).devices if d.kind == "CPU")
    tasks_here = collections.Counter(t["node"] for t in plan.tasks)[node_name]
    return int(host * HOST_MEMORY_SHARE / max(tasks_here, 1)) // GIB


def task_resources(plan, options, tasks):
    """``{"cpu": ..., "memory": ...}`` of one pod of ``tasks`` (requests and limits alike)."""
    cpu = options.cpu or str(CPUS_PER_DEVICE * max((len(t["devices"]) for t in tasks), default=1))
    memory = options.memory
    if memory is None:
        gib = min(_memory_share(plan, t["node"]) for t in tasks) if tasks else 0
        if gib < 1:
            where = tasks[0]["node"] if tasks else "the launcher"
            raise LaunchError(f"the cluster spec gives node {where!r} no host memory to share; give --memory",
                              source=plan.where)
        memory = f"{gib}Gi"
    return {"cpu": cpu, "memory": memory}
