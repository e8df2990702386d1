"""PodGroup for gang scheduling: Volcano or the scheduler-plugins coscheduler.

Every pod of the job carries the group's name (see launcher.pods); the
scheduler starts none of them until ``minMember`` pods fit at once.
"""

from __future__ import annotations

from launcher.pods import GPU_RESOURCE

GROUPS = {
    "volcano": ("scheduling.volcano.sh/v1beta1", "PodGroup"),
    "coscheduling": ("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
}


def job_replicas(job):
    """Replica kind -> replica spec of a TFJob or MPIJob object."""
    spec = job["spec"]
    return spec.get("tfReplicaSpecs") or spec.get("mpiReplicaSpecs")


def build_podgroup(job, gang):
    """The PodGroup of ``job`` (a TFJob or MPIJob dict) for scheduler ``gang``."""
    replicas = job_replicas(job)
    members = sum(r["replicas"] for r in replicas.values())
    gpus = sum(
        r["replicas"] * c.get("resources", {}).get("limits", {}).get(GPU_RESOURCE, 0)
        for r in replicas.values()
        for c in r["template"]["spec"]["containers"]
    )
    api_version, kind = GROUPS[gang]
    spec = {"minMember": members}
    if gpus:
        spec["minResources"] = {GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": job["metadata"]["name"], "namespace": job["metadata"]["namespace"]},
        "spec": spec,
    }
