"""What the operators make from an emitted job: its Pods and its PodGroup.

No operator runs where manifests are checked (unit tests, a bare API server:
``benchmarks/k8s_apiserver.py``), so this module writes the objects the
operators would, read from their sources, to check that the emitted
templates work once an operator has filled them in: the hostfile every rank
reads is mounted, TF_CONFIG names the plan's tasks, the pods join the one
PodGroup, which asks for what the pods request.

Sources (read, not copied):

- TFJob: kubeflow/trainer release-1.9 ``pkg/controller.v1/common/pod.go``
  (pod ``<job>-<type>-<i>``, labels, restart policy ``ExitCode`` -> ``Never``
  in ``pkg/core/pod.go``), ``pkg/controller.v1/tensorflow/tensorflow.go``
  (TF_CONFIG: every replica ``<job>-<type>-<i>.<namespace>.svc:<port>``, the
  task, ``environment: cloud``), ``pkg/controller.v1/control/podgroup_control.go``.
- MPIJob v2beta1: kubeflow/mpi-operator ``pkg/controller/mpi_job_controller.go``
  (``newWorker``, ``newLauncherPodTemplate``, ``setupSSHOnPod``,
  ``newConfigMap``) and ``pkg/controller/podgroup.go``.
- TrainJob: kubeflow/trainer v2.3.0 ``pkg/runtime/framework/plugins/jobset``
  (the trainer step's ``node`` container takes the TrainJob's image, command,
  env), JobSet's pod naming ``<jobset>-<replicated job>-<job index>-<pod index>``
  with the JobSet's name as subdomain, and the Job controller's
  ``JOB_COMPLETION_INDEX`` of an Indexed Job.
"""

from __future__ import annotations

import copy
import json

from autodist.plan import DEFAULT_PORT

GROUPS = {
    "volcano": ("scheduling.volcano.sh/v1beta1", "PodGroup"),
    "coscheduling": ("scheduling.x-k8s.io/v1alpha1", "PodGroup"),
}
# The training operator's Volcano queue when schedulingPolicy names none.
DEFAULT_VOLCANO_QUEUE = "default"
SCHEDULERS = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler"}
GROUP_KEYS = {"volcano": ("annotations", "scheduling.k8s.io/group-name"),
              "coscheduling": ("labels", "scheduling.x-k8s.io/pod-group")}
MPI_CONFIG_MOUNT = "/etc/mpi"
SSH_MOUNT = "/root/.ssh"  # mpi-operator's default sshAuthMountPath


def operator_podgroup(job, gang):
    """The PodGroup the operator makes for ``job`` (a TFJob or MPIJob dict) under ``gang``: named after the job."""
    policy = job["spec"]["runPolicy"]["schedulingPolicy"]
    spec = {"minMember": policy["minAvailable"], "minResources": dict(policy["minResources"])}
    if gang == "volcano":
        spec["queue"] = policy.get("queue", DEFAULT_VOLCANO_QUEUE)
        if policy.get("priorityClass"):
            spec["priorityClassName"] = policy["priorityClass"]
    api_version, kind = GROUPS[gang]
    meta = job["metadata"]
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "spec": spec}


def _pod(job, name, template, restart_policy, gang, labels):
    """A Pod from a replica template: the operator's labels, restart policy and gang decoration."""
    template = copy.deepcopy(template)
    meta = template.get("metadata", {})
    spec = template["spec"]
    spec["restartPolicy"] = "Never" if restart_policy == "ExitCode" else restart_policy
    pod_meta = {"name": name, "namespace": job["metadata"]["namespace"],
                "labels": {**meta.get("labels", {}), **labels}}
    if meta.get("annotations"):
        pod_meta["annotations"] = dict(meta["annotations"])
    if gang:
        spec["schedulerName"] = spec.get("schedulerName") or SCHEDULERS[gang]
        where, key = GROUP_KEYS[gang]
        pod_meta.setdefault(where, {})[key] = job["metadata"]["name"]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


def _tfjob_cluster(job):
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    cluster = {}
    for rtype, replica in job["spec"]["tfReplicaSpecs"].items():
        ports = [p["containerPort"] for c in replica["template"]["spec"]["containers"] for p in c.get("ports", [])
                 if p.get("name") == "tfjob-port"]
        port = ports[0] if ports else DEFAULT_PORT
        cluster[rtype.lower()] = [f"{name}-{rtype.lower()}-{i}.{namespace}.svc:{port}" for i in range(replica["replicas"])]
    return cluster


def tfjob_pods(job, gang=None):
    """The Pods the training operator creates for a TFJob, each with its TF_CONFIG."""
    name = job["metadata"]["name"]
    cluster = _tfjob_cluster(job)
    pods = []
    for rtype, replica in job["spec"]["tfReplicaSpecs"].items():
        for i in range(replica["replicas"]):
            labels = {"training.kubeflow.org/job-name": name, "training.kubeflow.org/replica-type": rtype.lower(),
                      "training.kubeflow.org/replica-index": str(i), "training.kubeflow.org/operator-name": "tfjob-controller"}
            pod = _pod(job, f"{name}-{rtype.lower()}-{i}", replica["template"], replica["restartPolicy"], gang, labels)
            config = {"cluster": cluster, "task": {"type": rtype.lower(), "index": i}, "environment": "cloud"}
            for container in pod["spec"]["containers"]:
                if container["name"] == "tensorflow":
                    container.setdefault("env", []).append({"name": "TF_CONFIG", "value": json.dumps(config)})
            if gang == "volcano":
                pod["metadata"]["annotations"]["volcano.sh/task-spec"] = rtype.lower()
            pods.append(pod)
    return pods


def _ssh(job, spec):
    spec["volumes"].append({"name": "ssh-auth", "secret": {"secretName": f"{job['metadata']['name']}-ssh", "defaultMode": 0o600,
                            "items": [{"key": "ssh-privatekey", "path": "id_rsa"}, {"key": "ssh-publickey", "path": "id_rsa.pub"},
                                      {"key": "ssh-publickey", "path": "authorized_keys"}]}})
    spec["containers"][0].setdefault("volumeMounts", []).append({"name": "ssh-auth", "mountPath": SSH_MOUNT})


def mpijob_pods(job, gang=None):
    """The Pods mpi-operator creates for an MPIJob: its workers, then the launcher (once they are ready)."""
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    specs = job["spec"]["mpiReplicaSpecs"]
    pods = []
    for role, replica in (("worker", specs["Worker"]), ("launcher", specs["Launcher"])):
        for i in range(replica["replicas"]):
            pod_name = f"{name}-worker-{i}" if role == "worker" else f"{name}-launcher"
            labels = {"training.kubeflow.org/operator-name": "mpi-operator", "training.kubeflow.org/job-name": name,
                      "training.kubeflow.org/job-role": role}
            pod = _pod(job, pod_name, replica["template"], replica["restartPolicy"], gang, labels)
            spec = pod["spec"]
            spec["hostname"], spec["subdomain"] = pod_name, name
            spec["dnsConfig"] = {"searches": [f"{name}.{namespace}.svc.cluster.local"]}
            container = spec["containers"][0]
            env = container.setdefault("env", [])
            env.append({"name": "K_MPI_JOB_ROLE", "value": role})
            if role == "launcher":
                hostfile = f"{MPI_CONFIG_MOUNT}/hostfile"
                env += [{"name": "OMPI_MCA_orte_keep_fqdn_hostnames", "value": "true"},
                        {"name": "OMPI_MCA_orte_default_hostfile", "value": hostfile},
                        {"name": "OMPI_MCA_plm_rsh_args", "value": "-o ConnectionAttempts=10"},
                        {"name": "OMPI_MCA_orte_set_default_slots", "value": str(job["spec"]["slotsPerWorker"])},
                        {"name": "NVIDIA_VISIBLE_DEVICES", "value": ""}, {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""}]
                spec["volumes"].append({"name": "mpi-job-config", "configMap": {"name": f"{name}-config", "items": [
                    {"key": "hostfile", "path": "hostfile", "mode": 0o444},
                    {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555}]}})
                container.setdefault("volumeMounts", []).append({"name": "mpi-job-config", "mountPath": MPI_CONFIG_MOUNT})
            _ssh(job, spec)
            pods.append(pod)
    return pods


def mpijob_hostfile(job):
    """The hostfile mpi-operator writes into ConfigMap ``<job>-config`` (OpenMPI form)."""
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    slots = job["spec"]["slotsPerWorker"]
    workers = job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"]
    return "".join(f"{name}-worker-{i}.{name}.{namespace}.svc slots={slots}\n" for i in range(workers))


def mounted_file(pod, container, path):
    """(volume, key) that puts file ``path`` into ``container`` of ``pod``, or None when nothing does."""
    folder, _, filename = path.rpartition("/")
    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if mount["mountPath"].rstrip("/") != folder:
            continue
        volume = volumes[mount["name"]]
        source = volume.get("configMap") or volume.get("secret") or {}
        items = source.get("items")
        keys = [i["key"] for i in items if i["path"] == filename] if items is not None else [filename]
        if keys:
            return volume, keys[0]
    return None
