"""CPU and memory of every pod: from the cluster spec unless the user says.

A pod with requests is not the first evicted (BestEffort), and namespaces
with a ResourceQuota or LimitRange admit it.  Limits equal requests: a task
keeps what it was promised and cannot take a neighbour's memory.

- memory: :data:`HOST_MEMORY_SHARE` of the node's host memory (its CPU
  devices' memory in the cluster spec), split evenly between the plan's
  tasks on that node, in whole GiB; the smallest share over the nodes a
  replica template serves.
- CPU: a GPU worker :data:`CPUS_PER_DEVICE` per GPU (input pipeline and
  TensorFlow's inter-op threads); a chief or PS task :data:`SERVICE_CPUS`
  (it runs the client, or serves variables and applies updates); a CPU
  worker what the plan prices it with: its node's cores (the CPU model's, see
  ``autodist.resource_spec.presets``) less :data:`NODE_RESERVED_CPUS` and
  less what the node's other tasks take, shared by the node's CPU workers.
  A CPU of unknown core count gives a CPU worker :data:`CPUS_PER_DEVICE`.
"""

from __future__ import annotations

import collections
import decimal

from autodist.errors import LaunchError

GIB = 2**30
# Left for the kubelet, system daemons and the page cache: a fifth of host memory.
HOST_MEMORY_SHARE = 0.8
# Input pipeline and TensorFlow's inter-op threads per GPU.
CPUS_PER_DEVICE = 4
# A chief (the client that drives every step) or a PS task (gRPC serving and updates).
SERVICE_CPUS = 4
# Left on every node for the kubelet, the container runtime and system daemons.
NODE_RESERVED_CPUS = 2
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


def _device_kinds(plan, task):
    return collections.Counter(plan.resource_spec.device(d).kind for d in task["devices"])


def _node_cores(plan, node_name):
    from autodist.resource_spec.presets import DEVICE_MODELS

    cores = [getattr(DEVICE_MODELS.get(d.model), "cores", 0) for d in plan.resource_spec.node(node_name).devices
             if d.kind == "CPU"]
    return sum(cores) if cores and all(cores) else 0


def _fixed_cpus(plan, task):
    """CPUs of a task that is not a CPU worker; None for a CPU worker."""
    kinds = _device_kinds(plan, task)
    if kinds["GPU"]:
        return CPUS_PER_DEVICE * kinds["GPU"]
    if task["job"] == "worker" and kinds["CPU"]:
        return None
    return SERVICE_CPUS


def task_cpus(plan, task):
    """Whole CPUs the plan prices ``task`` with (see the module docstring)."""
    fixed = _fixed_cpus(plan, task)
    if fixed is not None:
        return fixed
    cores = _node_cores(plan, task["node"])
    if not cores:
        return CPUS_PER_DEVICE
    here = [t for t in plan.tasks if t["node"] == task["node"]]
    taken = sum(_fixed_cpus(plan, t) or 0 for t in here)
    sharing = sum(_fixed_cpus(plan, t) is None for t in here)
    return max((cores - NODE_RESERVED_CPUS - taken) // sharing, 1)


def task_resources(plan, options, tasks):
    """``{"cpu": ..., "memory": ...}`` of one pod of ``tasks`` (requests and limits alike)."""
    cpu = options.cpu or str(max((task_cpus(plan, t) for t in tasks), default=SERVICE_CPUS))
    memory = options.memory
    if memory is None:
        gib = min(_memory_share(plan, t["node"]) for t in tasks) if tasks else 0
        if gib < 1:
            where = tasks[0]["node"] if tasks else "the launcher"
            raise LaunchError(f"the cluster spec gives node {where!r} no host memory to share; give --memory",
                              source=plan.where)
        memory = f"{gib}Gi"
    return {"cpu": cpu, "memory": memory}
