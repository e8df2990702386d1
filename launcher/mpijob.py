"""MPIJob (kubeflow.org/v2beta1) for an allreduce plan.

One Launcher pod runs ``mpirun``; one Worker pod per node holds that node's
planned GPUs and runs one rank per GPU (``slotsPerWorker``).  Each rank is
``autodist worker``, which finds its replica from the MPI environment rather
than TF_CONFIG (:mod:`launcher.runtime.mpi`) and sums gradients with
TensorFlow's collective ops (NCCL).
"""

from __future__ import annotations

from autodist.errors import LaunchError
from launcher.pods import gpus_per_task, nccl_environment, pod_template, worker_command

API_VERSION = "kubeflow.org/v2beta1"
KIND = "MPIJob"
CONTAINER_NAME = "autodist"
# Workers of the mpi-operator's OpenMPI images serve SSH for the launcher.
SSHD_COMMAND = ["/usr/sbin/sshd", "-De"]


def launcher_command(plan, options, slots):
    """``mpirun`` over every worker slot, exporting the NCCL settings and the plan's path."""
    ranks = slots * len(plan.tasks_of("worker"))
    names = sorted(nccl_environment(plan, options)) + ["AUTODIST_PLAN"]
    exports = [arg for name in names for arg in ("-x", name)]
    return ["mpirun", "--allow-run-as-root", "-np", str(ranks), "-bind-to", "none", "-map-by", "slot", *exports, *worker_command(options)]


def build_mpijob(plan, options, job_name):
    """The MPIJob object; raises LaunchError for a plan with parameter servers."""
    if plan.has_ps():
        raise LaunchError("an MPIJob runs allreduce plans only; this plan has PS tasks (emit a TFJob)", source=plan.where)
    workers = plan.tasks_of("worker")
    slots = max(gpus_per_task(plan, workers, uniform=True), 1)
    launcher = pod_template(
        plan, options, job_name, "launcher", [], launcher_command(plan, options, slots), CONTAINER_NAME, nccl=True
    )
    worker = pod_template(plan, options, job_name, "worker", workers, SSHD_COMMAND, CONTAINER_NAME, nccl=True)
    specs = {
        "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": launcher},
        "Worker": {"replicas": len(workers), "restartPolicy": "OnFailure", "template": worker},
    }
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job_name, "namespace": options.namespace},
        "spec": {
            "slotsPerWorker": slots,
            "runPolicy": {"cleanPodPolicy": "Running", "schedulingPolicy": {"minAvailable": 1 + len(workers)}},
            "mpiImplementation": "OpenMPI",
            "mpiReplicaSpecs": specs,
        },
    }
