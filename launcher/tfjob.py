"""TFJob (kubeflow.org/v1) for a plan: Chief/Worker/PS replicas as planned."""

from __future__ import annotations

from autodist.plan import DEFAULT_PORT
from launcher.pods import pod_template, worker_command

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
# The TF operator names replica types in CamelCase and writes them lower case
# into TF_CONFIG's cluster spec, which is what the plan's jobs are called.
REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS"}
CONTAINER_NAME = "tensorflow"  # the TF operator finds its container by this name


def replica_specs(plan, options, job_name):
    """``tfReplicaSpecs``: one entry per job of the plan, in chief, worker, ps order."""
    allreduce = bool(plan.collectives["buckets"])
    specs = {}
    for job, replica_type in REPLICA_TYPES.items():
        tasks = plan.tasks_of(job)
        if not tasks:
            continue
        template = pod_template(
            plan,
            options,
            job_name,
            job,
            tasks,
            worker_command(options),
            CONTAINER_NAME,
            port=DEFAULT_PORT,
            nccl=allreduce and job == "worker",
        )
        specs[replica_type] = {"replicas": len(tasks), "restartPolicy": "OnFailure", "template": template}
    return specs


def build_tfjob(plan, options, job_name):
    """The TFJob object; ``minAvailable`` covers every replica so the job starts whole."""
    specs = replica_specs(plan, options, job_name)
    scheduling = {"minAvailable": sum(s["replicas"] for s in specs.values())}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job_name, "namespace": options.namespace},
        "spec": {
            "runPolicy": {"cleanPodPolicy": "Running", "schedulingPolicy": scheduling},
            "tfReplicaSpecs": specs,
        },
    }
