"""PodGroup for gang scheduling: Volcano or the scheduler-plugins coscheduler.

Every pod of the job carries the group's name (see launcher.pods); the
scheduler starts none of them until ``minMember`` pods fit at once.
"""

from __future__ import annotations

from launcher.pods import GPU_RESOURCE
from launcher.resources import quantity_value
from launcher.scheduling import JOB_LABEL, podgroup_name

GROUPS = {
    "volcano": ("scheduling.volcano.sh/v1beta1", "PodGroup"),
    "coscheduling": ("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
}


def job_replicas(job):
    """Replica kind -> replica spec of a TFJob or MPIJob object."""
    spec = job["spec"]
    return spec.get("tfReplicaSpecs") or spec.get("mpiReplicaSpecs")


def min_resources(replicas):
    """What every pod of the job asks for together: CPU (millicores), memory (bytes) and GPUs."""
    totals = {"cpu": 0, "memory": 0, GPU_RESOURCE: 0}
    for replica in replicas.values():
        for container in replica["template"]["spec"]["containers"]:
            resources = container["resources"]
            for name in ("cpu", "memory"):
                totals[name] += replica["replicas"] * quantity_value(resources["requests"][name])
            totals[GPU_RESOURCE] += replica["replicas"] * resources["limits"].get(GPU_RESOURCE, 0)
    out = {"cpu": f"{int(totals['cpu'] * 1000)}m", "memory": str(int(totals["memory"]))}
    if totals[GPU_RESOURCE]:
        out[GPU_RESOURCE] = str(totals[GPU_RESOURCE])
    return out


def build_podgroup(job, options):
    """The PodGroup of ``job`` (a TFJob or MPIJob dict) for scheduler ``options.gang``.

    It is named ``<job>-gang``: a training operator with gang scheduling on
    makes its own PodGroup named after the job, and the two must not clash.
    Volcano's PodGroup takes the ``queue`` and ``priorityClassName`` options;
    the coscheduling one has neither (the pods carry the priority class).
    """
    replicas = job_replicas(job)
    members = sum(r["replicas"] for r in replicas.values())
    api_version, kind = GROUPS[options.gang]
    spec = {"minMember": members, "minResources": min_resources(replicas)}
    if options.gang == "volcano":
        if options.queue:
            spec["queue"] = options.queue
        if options.priority:
            spec["priorityClassName"] = options.priority
    name = job["metadata"]["name"]
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": podgroup_name(name), "namespace": job["metadata"]["namespace"], "labels": {JOB_LABEL: name}},
        "spec": spec,
    }
