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


def _upsert_env(env, extra):
    names = {e["name"]: i for i, e in enumerate(env)}
    for entry in extra:
        if entry["name"] in names:
            env[names[entry["name"]]] = entry
        else:
            env.append(entry)


def trainjob_pods(objects, gang=None):
    """The Pods of a TrainJob on autodist's runtime: the runtime's ``node`` pod, filled in by Trainer and JobSet."""
    job = next(o for o in objects if o["kind"] == "TrainJob")
    runtime = next(o for o in objects if o["kind"] == "ClusterTrainingRuntime")
    name = job["metadata"]["name"]
    (rjob,) = [r for r in runtime["spec"]["template"]["spec"]["replicatedJobs"] if r["name"] == "node"]
    template = copy.deepcopy(rjob["template"]["spec"]["template"])
    spec, trainer = template["spec"], job["spec"]["trainer"]
    (container,) = [c for c in spec["containers"] if c["name"] == "node"]
    container.update(image=trainer["image"], command=list(trainer["command"]),
                     resources=copy.deepcopy(trainer["resourcesPerNode"]))
    _upsert_env(container.setdefault("env", []), trainer["env"])
    meta = template.setdefault("metadata", {})
    for patch in job["spec"].get("runtimePatches", []):
        for rpatch in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
            pod_patch = rpatch["template"]["spec"]["template"]
            for key in ("labels", "annotations"):
                meta.setdefault(key, {}).update(pod_patch.get("metadata", {}).get(key, {}))
            patch_spec = copy.deepcopy(pod_patch.get("spec", {}))
            spec.setdefault("volumes", []).extend(patch_spec.pop("volumes", []))
            for cpatch in patch_spec.pop("containers", []):
                (target,) = [c for c in spec["containers"] if c["name"] == cpatch["name"]]
                target.setdefault("volumeMounts", []).extend(cpatch.get("volumeMounts", []))
                _upsert_env(target.setdefault("env", []), cpatch.get("env", []))
                if "securityContext" in cpatch:
                    target["securityContext"] = cpatch["securityContext"]
            spec.update(patch_spec)
    pods = []
    for i in range(trainer["numNodes"]):
        hostname = f"{name}-node-0-{i}"
        labels = {"jobset.sigs.k8s.io/jobset-name": name, "jobset.sigs.k8s.io/replicatedjob-name": "node",
                  "jobset.sigs.k8s.io/job-index": "0", "batch.kubernetes.io/job-completion-index": str(i)}
        pod = _pod(job, f"{hostname}-{i:05d}", template, spec.get("restartPolicy", "Never"), gang, labels)
        pod["spec"]["hostname"], pod["spec"]["subdomain"] = hostname, name
        pod["metadata"].setdefault("annotations", {})["batch.kubernetes.io/job-completion-index"] = str(i)
        pod["spec"]["containers"][0]["env"].append({"name": "JOB_COMPLETION_INDEX", "value": str(i)})
        pods.append(pod)
    return pods


def trainjob_podgroup(objects, gang):
    """The PodGroup Trainer makes for a TrainJob: every pod, their requests summed (extended resources from limits)."""
    from launcher.resources import quantity_value

    job = next(o for o in objects if o["kind"] == "TrainJob")
    pods = trainjob_pods(objects, gang)
    totals = {}
    for pod in pods:
        for c in pod["spec"]["containers"]:
            wanted = {**{k: v for k, v in c["resources"].get("limits", {}).items() if "/" in k}, **c["resources"]["requests"]}
            for key, value in wanted.items():
                totals[key] = totals.get(key, 0) + quantity_value(value)
    resources = {k: (f"{int(v * 1000)}m" if k == "cpu" else str(int(v))) for k, v in sorted(totals.items())}
    spec = {"minMember": len(pods), "minResources": resources}
    queue = job["metadata"].get("annotations", {}).get("scheduling.volcano.sh/queue-name")
    if gang == "volcano" and queue:
        spec["queue"] = queue
    api_version, kind = GROUPS[gang]
    return {"apiVersion": api_version, "kind": kind,
            "metadata": {"name": job["metadata"]["name"], "namespace": job["metadata"]["namespace"]}, "spec": spec}
