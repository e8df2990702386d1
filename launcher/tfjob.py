"""TFJob (kubeflow.org/v1) for a plan: Chief/Worker/PS replicas as planned.

Failures: a collective plan's replicas form one ring that a restarted pod
cannot rejoin, so every replica has ``restartPolicy: ExitCode``: the operator
restarts a pod that exits with a retryable code (128 and above: killed,
evicted, or ``autodist worker`` after a lost peer) and fails the job on any
other, up to ``runPolicy.backoffLimit`` restarts.  A PS plan's worker can
come back alone, so its replicas restart ``OnFailure``.
"""

from __future__ import annotations

from autodist.plan import DEFAULT_PORT
from launcher.pods import pod_template, worker_command
from launcher.runtime.collective import collective_mode
from launcher.scheduling import JOB_LABEL, run_policy

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
# The TF operator names replica types in CamelCase and writes them lower case
# into TF_CONFIG's cluster spec, which is what the plan's jobs are called.
REPLICA_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS"}
CONTAINER_NAME = "tensorflow"  # the TF operator finds its container by this name


def replica_specs(plan, options, job_name):
    """``tfReplicaSpecs``: one entry per job of the plan, in chief, worker, ps order."""
    restart = "ExitCode" if collective_mode(plan) else "OnFailure"
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
            collective=job == "worker",
        )
        specs[replica_type] = {"replicas": len(tasks), "restartPolicy": restart, "template": template}
    return specs


def build_tfjob(plan, options, job_name):
    """The TFJob object; ``minAvailable`` covers every replica so the job starts whole."""
    specs = replica_specs(plan, options, job_name)
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job_name, "namespace": options.namespace, "labels": {JOB_LABEL: job_name}},
        "spec": {
            "runPolicy": run_policy(options, specs),
            "tfReplicaSpecs": specs,
        },
    }
