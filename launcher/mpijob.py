"""MPIJob (kubeflow.org/v2beta1) for an allreduce plan.

One Launcher pod runs ``mpirun``; one Worker pod per node holds that node's
planned GPUs and runs one rank per GPU (``slotsPerWorker``).  Each rank is
``autodist worker``, which finds its replica from the MPI environment rather
than TF_CONFIG (:mod:`launcher.runtime.mpi`) and sums gradients with
TensorFlow's collective ops (NCCL).

Failures: ``mpirun`` fails when any rank does, and the mpi-operator then
reruns the launcher, so the whole job restarts together, up to
``runPolicy.backoffLimit`` times.
"""

from __future__ import annotations

from autodist.errors import LaunchError
from launcher.options import parse_env
from launcher.pods import (
    LOG_DIR_ENV,
    gpus_per_task,
    nccl_environment,
    pod_template,
    worker_command,
    workers_use_nccl,
)
from launcher.runtime.collective import why_not_collective
from launcher.scheduling import JOB_LABEL, run_policy

API_VERSION = "kubeflow.org/v2beta1"
KIND = "MPIJob"
CONTAINER_NAME = "autodist"
# Workers of the mpi-operator's OpenMPI images serve SSH for the launcher.
SSHD_COMMAND = ["/usr/sbin/sshd", "-De"]


# The mpi-operator writes the hostfile into ConfigMap <job>-config and mounts it
# at /etc/mpi in the launcher only (kubeflow/mpi-operator
# pkg/controller/mpi_job_controller.go: configSuffix, configMountPath,
# newConfigMap, newLauncherPodTemplate).  Every rank reads it
# (launcher.runtime.mpi), so the Worker template mounts it too.
HOSTFILE_CONFIG_MAP_SUFFIX = "-config"
HOSTFILE_DIR = "/etc/mpi"
HOSTFILE_VOLUME = "mpi-hostfile"
# What a rank started over ssh needs from the launcher's environment, beside
# the NCCL settings: the image's PATH (autodist, python) and its libraries (CUDA).
FORWARDED_ENV = ("PATH", "LD_LIBRARY_PATH", "AUTODIST_PLAN")


def launcher_command(plan, options, slots):
    """``mpirun`` over every worker slot, exporting PATH, the NCCL settings, the plan's path and the user's variables."""
    ranks = slots * len(plan.tasks_of("worker"))
    nccl = sorted(nccl_environment(plan, options)) if workers_use_nccl(plan) else []
    names = list(FORWARDED_ENV) + nccl + ([LOG_DIR_ENV] if options.log_dir else [])
    names += [parse_env(text)["name"] for text in options.env]
    exports = [arg for name in names for arg in ("-x", name)]
    return ["mpirun", "--allow-run-as-root", "-np", str(ranks), "-bind-to", "none", "-map-by", "slot", *exports, *worker_command(options)]


def build_mpijob(plan, options, job_name):
    """The MPIJob object; raises LaunchError for a plan that does not run on collectives."""
    if plan.has_ps():
        raise LaunchError("an MPIJob runs allreduce plans only; this plan has PS tasks (emit a TFJob)", source=plan.where)
    reason = why_not_collective(plan)
    if reason:
        raise LaunchError(f"an MPIJob runs allreduce plans only: {reason} (emit a TFJob)", source=plan.where)
    workers = plan.tasks_of("worker")
    slots = max(gpus_per_task(plan, workers, uniform=True), 1)
    launcher = pod_template(
        plan, options, job_name, "launcher", [], launcher_command(plan, options, slots), CONTAINER_NAME, collective=True
    )
    worker = pod_template(plan, options, job_name, "worker", workers, SSHD_COMMAND, CONTAINER_NAME, collective=True)
    mount_hostfile(worker, job_name)
    specs = {
        "Launcher": {"replicas": 1, "restartPolicy": "OnFailure", "template": launcher},
        "Worker": {"replicas": len(workers), "restartPolicy": "OnFailure", "template": worker},
    }
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": job_name, "namespace": options.namespace, "labels": {JOB_LABEL: job_name}},
        "spec": {
            "slotsPerWorker": slots,
            "runPolicy": run_policy(options, specs),
            "mpiImplementation": "OpenMPI",
            # the launcher starts once every worker is ready (its sshd up), not racing them
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiReplicaSpecs": specs,
        },
    }


def mount_hostfile(template, job_name):
    """Mount the operator's ``<job>-config`` hostfile read-only at /etc/mpi in ``template``'s main container."""
    spec = template["spec"]
    spec["volumes"].append({"name": HOSTFILE_VOLUME, "configMap": {
        "name": job_name + HOSTFILE_CONFIG_MAP_SUFFIX, "items": [{"key": "hostfile", "path": "hostfile"}]}})
    spec["containers"][0]["volumeMounts"].append({"name": HOSTFILE_VOLUME, "mountPath": HOSTFILE_DIR, "readOnly": True})
