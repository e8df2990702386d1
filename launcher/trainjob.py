"""TrainJob (Kubeflow Trainer v2, trainer.kubeflow.org/v1alpha1) for an allreduce plan, and its runtime.

Trainer v2 has no TensorFlow runtime, so autodist brings a plain one: a
ClusterTrainingRuntime (``autodist-tensorflow``, or ``-volcano`` /
``-coscheduling`` with gang scheduling, which a runtime's ``podGroupPolicy``
sets) whose one replicated Job ``node`` (the trainer step) runs one Indexed
pod per task.  The TrainJob fills it in (kubeflow/trainer v2.3.0
``pkg/runtime/framework/plugins/jobset/builder.go`` and ``plainml``): the
image, the command, the variables and ``numNodes`` (pods) from ``trainer``,
each pod's requests from ``resourcesPerNode``, volumes, mounts and placement
from ``runtimePatches``.

TF_CONFIG comes from autodist: the cluster (every pod's JobSet DNS name,
``<job>-node-0-<i>.<job>.<namespace>.svc``) is in ``AUTODIST_TF_CLUSTER``,
and each pod's command adds its task index, the Job controller's
``JOB_COMPLETION_INDEX``; it also unpacks the plan (what the TFJob's init
container does: a runtime patch cannot add one).  Pods are alike in a
TrainJob, so only plans of workers alone (allreduce) can be one.

Failures: the runtime's JobSet restarts all its pods together
(``failurePolicy.maxRestarts``), as a collective ring needs.
"""

from __future__ import annotations

import json

from autodist.errors import InputError, LaunchError
from autodist.plan import DEFAULT_PORT
from launcher import plan_data
from launcher.options import parse_network
from launcher.pods import pod_template, worker_command
from launcher.scheduling import JOB_LABEL, MANAGED_BY_LABEL

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KIND = "TrainJob"
RUNTIME_KIND = "ClusterTrainingRuntime"
DEFAULT_RUNTIME = "autodist-tensorflow"
REPLICATED_JOB = "node"  # the trainer step's replicated Job and container (Trainer's constants.Node)
CONTAINER_NAME = "node"
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
CLUSTER_ENV = "AUTODIST_TF_CLUSTER"
RUNTIME_MAX_RESTARTS = 3
SCHEDULERS = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler"}
# What the command does before autodist starts: the plan, then this pod's TF_CONFIG.
ENTRY = (f"cat {plan_data.PARTS_DIR}/plan.json.gz.* | gunzip > {plan_data.PLAN_PATH} && "
         f'export TF_CONFIG="{{\\"cluster\\":${CLUSTER_ENV},\\"task\\":{{\\"type\\":\\"worker\\",'
         f'\\"index\\":$JOB_COMPLETION_INDEX}}}}" && exec "$@"')


def runtime_name(options):
    """The runtime the TrainJob names: ``--runtime``, else autodist's for the gang scheduler."""
    return options.runtime or DEFAULT_RUNTIME + (f"-{options.gang}" if options.gang else "")


def build_runtime(options):
    """autodist's ClusterTrainingRuntime for TensorFlow (the same for every job of one gang option)."""
    pod = {"containers": [{"name": CONTAINER_NAME, "image": options.image}], "restartPolicy": "Never"}
    spec = {
        "mlPolicy": {"numNodes": 1},
        "template": {"spec": {
            # pods reachable as <jobset>-node-0-<i>.<jobset> (kubernetes-sigs/jobset, Network: enableDNSHostnames;
            # the subdomain defaults to the JobSet's name, which is the TrainJob's)
            "network": {"enableDNSHostnames": True},
            "failurePolicy": {"maxRestarts": RUNTIME_MAX_RESTARTS},
            "replicatedJobs": [{"name": REPLICATED_JOB, "replicas": 1, "template": {
                "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                "spec": {"completionMode": "Indexed", "backoffLimit": 0, "template": {"spec": pod}}}}],
        }},
    }
    if options.gang:
        pod["schedulerName"] = SCHEDULERS[options.gang]
        spec["podGroupPolicy"] = {options.gang: {}}
    return {"apiVersion": API_VERSION, "kind": RUNTIME_KIND,
            "metadata": {"name": runtime_name(options), "labels": {"trainer.kubeflow.org/framework": "tensorflow",
                                                                    MANAGED_BY_LABEL: "autodist"}},
            "spec": spec}


def _check(plan, options):
    if plan.has_ps():
        raise LaunchError("a TrainJob's pods are alike: this plan's chief and PS tasks need other pods (emit a TFJob)",
                          source=plan.where)
    if parse_network(options.network) == ("host",):
        raise InputError("a TrainJob cannot put its pods on the host network (its runtime patches have no "
                         "hostNetwork); use attachment:NAME or emit a TFJob", field="--network")
    if options.priority:
        raise InputError("a TrainJob's runtime patches carry no priorityClassName; emit a TFJob or MPIJob",
                         field="--priority")


def cluster_addresses(job_name, namespace, count):
    """Each pod's host:port: JobSet names pod i ``<job>-node-0-<i>`` under the JobSet's (the job's) subdomain."""
    return [f"{job_name}-{REPLICATED_JOB}-0-{i}.{job_name}.{namespace}.svc:{DEFAULT_PORT}" for i in range(count)]


def build_trainjob(plan, options, job_name):
    """The TrainJob object for an allreduce plan; raises for a plan or option a TrainJob cannot carry."""
    _check(plan, options)
    workers = plan.tasks_of("worker")
    template = pod_template(plan, options, job_name, "worker", workers, worker_command(options), CONTAINER_NAME,
                            collective=True)
    container, spec = template["spec"]["containers"][0], template["spec"]
    cluster = json.dumps({"worker": cluster_addresses(job_name, options.namespace, len(workers))}, separators=(",", ":"))
    mounts = [m for m in container["volumeMounts"] if m["name"] != plan_data.PLAN_VOLUME]
    mounts += [{"name": plan_data.PLAN_VOLUME, "mountPath": plan_data.PLAN_DIR},  # written by the command
               {"name": plan_data.PARTS_VOLUME, "mountPath": plan_data.PARTS_DIR, "readOnly": True}]
    patch_container = {"name": CONTAINER_NAME, "volumeMounts": mounts}
    if "securityContext" in container:
        patch_container["securityContext"] = container["securityContext"]
    pod_patch = {"volumes": spec["volumes"], "containers": [patch_container]}
    for key in ("nodeSelector", "affinity", "tolerations", "imagePullSecrets"):
        if key in spec:
            pod_patch[key] = spec[key]
    metadata = {key: value for key, value in template["metadata"].items() if key in ("labels", "annotations")}
    trainer = {
        "image": options.image,
        "command": ["sh", "-c", ENTRY, "autodist-worker", *container["command"]],
        "env": [{"name": CLUSTER_ENV, "value": cluster}] + container["env"],
        "numNodes": len(workers),
        "resourcesPerNode": container["resources"],
    }
    annotations = {"scheduling.volcano.sh/queue-name": options.queue} if options.queue else {}
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job_name, "namespace": options.namespace, "labels": {JOB_LABEL: job_name},
                     **({"annotations": annotations} if annotations else {})},
        "spec": {
            "runtimeRef": {"name": runtime_name(options), "apiGroup": "trainer.kubeflow.org", "kind": RUNTIME_KIND},
            "trainer": trainer,
            "runtimePatches": [{"manager": "autodist.io/emit", "trainingRuntimeSpec": {"template": {"spec": {
                "replicatedJobs": [{"name": REPLICATED_JOB, "template": {"spec": {"template": {
                    "metadata": metadata, "spec": pod_patch}}}}]}}}}],
            "activeDeadlineSeconds": options.running_timeout,
        },
    }
