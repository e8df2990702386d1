"""Pod templates for every task kind, built in one place for TFJob and MPIJob.

A template holds one main container, with CPU, memory and GPU requests, and
an init container that unpacks the plan (:mod:`launcher.plan_data`); what
varies between replica kinds is the command, the GPU count, where the pod may
run (:mod:`launcher.scheduling`) and whether it talks NCCL over RDMA or
sockets.  The job's code is in the image's ``/workspace``, or mounted there
from a ConfigMap or a PersistentVolumeClaim (``--code-from``).
"""

from __future__ import annotations

import posixpath

from autodist.errors import InputError, LaunchError
from launcher import plan_data, scheduling
from launcher.options import (
    CODE_DIR,
    parse_code_from,
    parse_data_volume,
    parse_env,
    parse_network,
    parse_toleration,
)
from launcher.resources import quantity_value, task_resources
from launcher.runtime.collective import collective_mode
from launcher.scheduling import JOB_LABEL, ROLE_LABEL

WORKER_COMMAND = ["autodist", "worker", "--plan", plan_data.PLAN_PATH]
GPU_RESOURCE = "nvidia.com/gpu"
# An MPIJob launcher only runs mpirun.
LAUNCHER_RESOURCES = {"cpu": "1", "memory": "2Gi"}
# Multus: the NetworkAttachmentDefinitions a pod joins besides the pod network.
NETWORKS_ANNOTATION = "k8s.v1.cni.cncf.io/networks"
CODE_VOLUME = "code"
LOG_DIR_ENV = "AUTODIST_LOG_DIR"


def script_in_pod(script):
    """Where the training script is in the pod: a relative path is under the code folder."""
    return posixpath.join(CODE_DIR, script)


def worker_command(options):
    """The in-task entry point, with the training script when one is given."""
    return WORKER_COMMAND + ([script_in_pod(options.script), *options.script_args] if options.script else [])


def code_config_map_name(job_name):
    return f"{job_name}-code"


# RoCE v2 over IPv4 is GID index 3 on ConnectX adapters with the default GID table.
ROCE_GID_INDEX = "3"
# AWS EFA: RDMA over Ethernet through libfabric (the aws-ofi-nccl plugin), one
# device-plugin resource per adapter (aws-efa-k8s-device-plugin).
EFA_RESOURCE = "vpc.amazonaws.com/efa"


def rdma_fabric(plan):
    """``"infiniband"``, ``"roce"`` or ``"efa"`` (RDMA NICs of kind ethernet); None without RDMA."""
    collectives = plan.collectives
    if collectives["inter_node"] != "rdma":
        return None
    kinds = set(collectives["inter_node_link_kinds"])
    if kinds == {"ethernet"}:
        return "efa"
    return "roce" if "roce" in kinds else "infiniband"


# ConnectX adapters' verbs device names: mlx5_0, mlx5_1, ... (``ibv_devices``).
HCA_PREFIX = "mlx5_"


def exact_hcas(plan):
    """NCCL_IB_HCA in exact-match form (``=mlx5_0,mlx5_1``): the first adapters, one per RDMA NIC of a node.

    A bare prefix (``mlx5``) also matches a node's Ethernet-only ports; the
    exact form names as many adapters as the planned nodes have RDMA NICs.
    Clusters that number them otherwise give ``--ib-hca``.
    """
    spec = plan.resource_spec
    count = min(sum(1 for nic in spec.node(t["node"]).nics if nic.rdma) for t in plan.tasks_of("worker"))
    return "=" + ",".join(f"{HCA_PREFIX}{i}" for i in range(max(count, 1)))


def nccl_environment(plan, options):
    """NCCL variables for the plan's transport between nodes.

    Meanings from the NCCL user guide, "Environment Variables"
    (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html):
    NCCL_IB_DISABLE=0/1 allows/forbids the IB verbs transport (InfiniBand and
    RoCE); NCCL_IB_HCA selects the adapters (a prefix, or "=" and exact
    names); NCCL_IB_GID_INDEX
    picks the GID a RoCE adapter uses (RoCE v2 needs the right one);
    NCCL_NET_GDR_LEVEL is the largest NIC-GPU distance at which GPUDirect RDMA
    is used (LOC: never, PHB: NIC and GPU under the same CPU);
    NCCL_SOCKET_IFNAME the interfaces for sockets ("^" excludes by prefix;
    under host networking the CNI's bridges and tunnels must be excluded);
    NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD the sockets per connection
    (their product may not exceed 64).  Where the plan's buckets run over
    sub-groups (hierarchical or master, autodist.collective_stages): the
    collectives inside a node take peer-to-peer paths as far as the node's
    fabric goes (NCCL_P2P_LEVEL: NVL over NVLink, PXB through a PCIe
    switch, PHB through the CPU), and hierarchical's groups across the nodes,
    one per local rank, keep each to its own NIC on every node
    (NCCL_CROSS_NIC=0: the rail its GPU sits on).
    """
    collectives = plan.collectives
    fabric = rdma_fabric(plan)
    env = {"NCCL_SOCKET_IFNAME": options.socket_ifname, **_sub_group_environment(plan)}
    if fabric == "efa":
        # aws-ofi-nccl README: FI_PROVIDER=efa selects EFA; FI_EFA_USE_DEVICE_RDMA=1
        # lets it read and write GPU memory directly (GPUDirect RDMA).
        env["FI_PROVIDER"] = "efa"
        if collectives["gpudirect_rdma"]:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    elif fabric:
        env["NCCL_IB_DISABLE"] = "0"
        env["NCCL_IB_HCA"] = options.ib_hca or exact_hcas(plan)
        env["NCCL_NET_GDR_LEVEL"] = "PHB" if collectives["gpudirect_rdma"] else "LOC"
        if fabric == "roce":
            env["NCCL_IB_GID_INDEX"] = ROCE_GID_INDEX
    elif collectives["inter_node"] == "socket":
        env["NCCL_IB_DISABLE"] = "1"
        # Several threads and sockets per peer: one TCP stream rarely fills a fast NIC.
        env["NCCL_SOCKET_NTHREADS"] = "4"
        env["NCCL_NSOCKS_PERTHREAD"] = "4"
    return dict(sorted(env.items()))


def _sub_group_environment(plan):
    """NCCL variables for the sub-groups of the plan's hierarchical and master buckets (see nccl_environment)."""
    from autodist.collective_stages import distinct_algorithms

    spec = plan.resource_spec
    offered, _ = distinct_algorithms([spec.device(r[0]).node for r in plan.strategy.replicas])
    staged = {b["algorithm"] for b in plan.collectives["buckets"]} & set(offered) - {"ring"}
    if not staged:
        return {}
    fabrics = [spec.node(t["node"]).fabric for t in plan.tasks_of("worker")]
    level = ("NVL" if all(f.kind == "nvlink" for f in fabrics)
             else "PHB" if any(f.kind != "pcie" or f.via_cpu for f in fabrics) else "PXB")
    env = {"NCCL_P2P_LEVEL": level}
    if "hierarchical" in staged:
        env["NCCL_CROSS_NIC"] = "0"
    return env


def gpus_per_task(plan, tasks, uniform=False):
    """GPUs each pod of ``tasks`` requests.

    One replica template serves all the tasks, so each pod asks for the most
    any task holds (a task with fewer leaves the rest idle; its devices are
    numbered from 0 all the same).  Every planned node must have that many;
    with ``uniform`` (MPI slots) every task must hold exactly as many.
    """
    spec = plan.resource_spec
    counts = [sum(spec.device(d).kind == "GPU" for d in t["devices"]) for t in tasks]
    most = max(counts, default=0)
    if uniform and len(set(counts)) > 1:
        raise LaunchError(f"{tasks[0]['job']} tasks hold different GPU counts {sorted(set(counts))}", source=plan.where)
    for t in tasks:
        if len(spec.node(t["node"]).gpus()) < most:
            raise LaunchError(
                f"node {t['node']!r} has fewer than the {most} GPUs every {t['job']} pod requests", source=plan.where
            )
    return most


def uses_nccl(plan, gpus):
    """Whether a pod holding ``gpus`` GPUs runs NCCL: only replicas of a collective plan.

    A hybrid plan's allreduced part is summed by ordinary TF ops from one
    client (see the README), so its workers get no NCCL or RDMA settings.
    """
    return bool(gpus) and collective_mode(plan)


def workers_use_nccl(plan):
    """Whether the plan's workers run NCCL (a collective plan on GPUs; a CPU job never does)."""
    workers = plan.tasks_of("worker")
    return uses_nccl(plan, gpus_per_task(plan, workers)) if workers else False


def _resources(plan, options, tasks, gpus, fabric):
    """Requests and limits; every quantity a string (server-side apply refuses integers in a ResourceList)."""
    amounts = task_resources(plan, options, tasks) if tasks else dict(LAUNCHER_RESOURCES)
    limits = dict(amounts)
    if gpus:
        limits[GPU_RESOURCE] = str(gpus)
    if fabric == "efa":
        limits[EFA_RESOURCE] = str(max(len(plan.resource_spec.node(t["node"]).nics) for t in tasks))
    elif fabric:
        limits[options.rdma_resource] = "1"
    return {"requests": amounts, "limits": limits}


def _environment(plan, options, nccl):
    env = {"AUTODIST_PLAN": plan_data.PLAN_PATH}
    if nccl:
        env.update(nccl_environment(plan, options))
    if options.log_dir:
        env[LOG_DIR_ENV] = options.log_dir
    entries = [{"name": k, "value": v} for k, v in env.items()]
    # the user's variables last: they may override ours
    return entries + [parse_env(text) for text in options.env]


def _code_volume(options, job_name):
    """The volume that holds the job's code, or None when it is in the image."""
    code = parse_code_from(options.code_from)
    if code[0] == "configmap":
        return {"name": CODE_VOLUME, "configMap": {"name": code_config_map_name(job_name)}}, None
    if code[0] == "pvc":
        sub_path = code[2].strip("/")
        return {"name": CODE_VOLUME, "persistentVolumeClaim": {"claimName": code[1], "readOnly": True}}, sub_path
    return None, None


def _volumes(plan, options, job_name, nccl, memory_limit):
    """(volumes, the main container's mounts): plan, code, data volumes and /dev/shm."""
    volumes = plan_data.plan_volumes(job_name, len(plan_data.plan_parts(plan)))
    mounts = [plan_data.plan_mount()]
    code, sub_path = _code_volume(options, job_name)
    if code:
        volumes.append(code)
        mounts.append({"name": CODE_VOLUME, "mountPath": CODE_DIR, "readOnly": True,
                       **({"subPath": sub_path} if sub_path else {})})
    for k, text in enumerate(options.data):
        claim, path = parse_data_volume(text)
        volumes.append({"name": f"data-{k}", "persistentVolumeClaim": {"claimName": claim}})
        mounts.append({"name": f"data-{k}", "mountPath": path})
    if nccl:
        # NCCL's shared-memory transport and RDMA buffers need more than the
        # 64 MiB /dev/shm a container gets by default; it counts as the pod's memory.
        if quantity_value(options.shm_size) > quantity_value(memory_limit):
            raise InputError(f"{options.shm_size} is more than the pod's memory limit {memory_limit}", field="--shm-size")
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": options.shm_size}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    return volumes, mounts


def pod_template(plan, options, job_name, role, tasks, command, container_name, port=None, collective=False):
    """The pod template of one replica kind.

    Parameters
    ----------
    plan : autodist.plan.Plan
    options : launcher.options.EmitOptions
    job_name : str
    role : str
        The replica kind in lower case (``chief``, ``worker``, ``ps``, ``launcher``).
    tasks : list of dict
        The plan's tasks this template serves (they fix placement, GPUs, CPU and memory).
    command : list of str
    container_name : str
    port : int, optional
        Container port to expose (TFJob's ``tfjob-port``).
    collective : bool
        Whether the pod takes part in the plan's collectives: with GPUs it
        then runs NCCL and gets the NCCL variables, /dev/shm and, when the
        plan crosses nodes over RDMA, the RDMA device, IPC_LOCK and the
        ``--network`` the user names.  ``collective`` without GPUs (an
        MPIJob launcher) exports the NCCL variables only, when the workers
        run NCCL.
    """
    gpus = gpus_per_task(plan, tasks)
    nccl = collective and uses_nccl(plan, gpus)
    fabric = rdma_fabric(plan) if nccl else None
    resources = _resources(plan, options, tasks, gpus, fabric)
    # an MPIJob launcher (no tasks) passes the NCCL settings on to its ranks with mpirun -x
    env = _environment(plan, options, nccl or (collective and not tasks and workers_use_nccl(plan)))
    container = {"name": container_name, "image": options.image, "command": list(command), "workingDir": CODE_DIR,
                 "env": env, "resources": resources}
    if port is not None:
        container["ports"] = [{"name": "tfjob-port", "containerPort": port}]
        # Under a collective plan a worker runs one process per replica, replica i on the port + i.
        replicas = max((len(t["devices"]) for t in tasks), default=1) if role == "worker" and collective_mode(plan) else 1
        container["ports"] += [{"name": f"replica-{i}", "containerPort": port + i} for i in range(1, replicas)]
    volumes, mounts = _volumes(plan, options, job_name, nccl, resources["limits"]["memory"])
    if fabric:
        # Registering (pinning) memory for RDMA needs IPC_LOCK.
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    container["volumeMounts"] = mounts

    labels, annotations, scheduler = scheduling.gang_membership(options, job_name)
    labels = {JOB_LABEL: job_name, ROLE_LABEL: role, **labels}
    spec = {"initContainers": [plan_data.unpack_container(options.image)], "containers": [container], "volumes": volumes}
    network = parse_network(options.network) if fabric else None
    if network == ("host",):
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"  # Services still resolve
    elif network:
        annotations[NETWORKS_ANNOTATION] = network[1]
    selector = scheduling.node_selector(plan, options, tasks)
    if selector:
        spec["nodeSelector"] = selector
    affinity = scheduling.affinity(plan, job_name, role, tasks, gpus)
    if affinity:
        spec["affinity"] = affinity
    if options.tolerations:
        spec["tolerations"] = [parse_toleration(text) for text in options.tolerations]
    if options.priority:
        spec["priorityClassName"] = options.priority
    if options.image_pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in options.image_pull_secrets]
    if scheduler:
        spec["schedulerName"] = scheduler
    metadata = {"labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def code_config_map(options, job_name):
    """With ``--code-from configmap``: the ConfigMap of the script's folder, or None."""
    if parse_code_from(options.code_from) != ("configmap",):
        return None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": code_config_map_name(job_name), "namespace": options.namespace,
                     "labels": {JOB_LABEL: job_name}},
        "data": dict(options.code_files),
    }
