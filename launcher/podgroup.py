"""PodGroup for gang scheduling: Volcano or the scheduler-plugins coscheduler.

Every pod of the job carries the group's name (see launcher.pods); the
scheduler starts none of them until ``minMember`` pods fit at once.
"""

from __future__ import annotations

from launcher.pods import GPU_RESOURCE
from launcher.scheduling import JOB_LABEL, podgroup_name

GROUPS = {
    "volcano": ("scheduling.volcano.sh/v1beta1", "PodGroup"),
    "coscheduling": ("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
}


def job_replicas(job):
    """Replica kind -> replica spec of a TFJob or MPIJob object."""
    spec = job["spec"]
    return spec.get("tfReplicaSpecs") or spec.get("mpiReplicaSpecs")


def build_podgroup(job, options):
    """The PodGroup of ``job`` (a TFJob or MPIJob dict) for scheduler ``options.gang``.

    It is named ``<job>-gang``: a training operator with gang scheduling on
    makes its own PodGroup named after the job, and the two must not clash.
    Volcano's PodGroup takes the ``queue`` and ``priorityClassName`` options;
    the coscheduling one has neither (the pods carry the priority class).
    """
    replicas = job_replicas(job)
    members = sum(r["replicas"] for r in replicas.values())
    gpus = sum(
        r["replicas"] * c.get("resources", {}).get("limits", {}).get(GPU_RESOURCE, 0)
        for r in replicas.values()
        for c in r["template"]["spec"]["containers"]
    )
    api_version, kind = GROUPS[options.gang]
    spec = {"minMember": members}
    if gpus:
        spec["minResources"] = {GPU_RESOURCE: str(gpus)}
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
