"""Pod templates for every task kind, built in one place for TFJob and MPIJob.

A template holds one container; what varies between replica kinds is the
command, the GPU count, where the pod may run and whether it talks NCCL over
RDMA or sockets.
"""

from __future__ import annotations

from autodist.errors import LaunchError
from launcher.runtime.collective import collective_mode

PLAN_DIR = "/etc/autodist"
PLAN_FILE = "plan.json"
PLAN_PATH = f"{PLAN_DIR}/{PLAN_FILE}"
WORKER_COMMAND = ["autodist", "worker", "--plan", PLAN_PATH]


def worker_command(options):
    """The in-task entry point, with the training script when one is given."""
    return WORKER_COMMAND + ([options.script, *options.script_args] if options.script else [])

GPU_RESOURCE = "nvidia.com/gpu"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Set by NVIDIA GPU feature discovery on every GPU node, e.g. "NVIDIA-H100-80GB-HBM3".
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
JOB_LABEL = "autodist.io/job"
ROLE_LABEL = "autodist.io/role"

# Where a Volcano or coscheduling PodGroup is named on each pod.
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULER_NAMES = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler"}

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


def plan_config_map_name(job_name):
    return f"{job_name}-plan"


def nccl_environment(plan, options):
    """NCCL variables for the plan's transport between nodes.

    Meanings from the NCCL user guide, "Environment Variables"
    (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html):
    NCCL_IB_DISABLE=0/1 allows/forbids the IB verbs transport (InfiniBand and
    RoCE); NCCL_IB_HCA selects the adapters (prefix match); NCCL_IB_GID_INDEX
    picks the GID a RoCE adapter uses (RoCE v2 needs the right one);
    NCCL_NET_GDR_LEVEL is the largest NIC-GPU distance at which GPUDirect RDMA
    is used (LOC: never, PHB: NIC and GPU under the same CPU);
    NCCL_SOCKET_IFNAME the interfaces for sockets ("^" excludes by prefix);
    NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD the sockets per connection
    (their product may not exceed 64).
    """
    collectives = plan.collectives
    fabric = rdma_fabric(plan)
    env = {"NCCL_SOCKET_IFNAME": options.socket_ifname}
    if fabric == "efa":
        # aws-ofi-nccl README: FI_PROVIDER=efa selects EFA; FI_EFA_USE_DEVICE_RDMA=1
        # lets it read and write GPU memory directly (GPUDirect RDMA).
        env["FI_PROVIDER"] = "efa"
        if collectives["gpudirect_rdma"]:
            env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    elif fabric:
        env["NCCL_IB_DISABLE"] = "0"
        env["NCCL_IB_HCA"] = options.ib_hca
        env["NCCL_NET_GDR_LEVEL"] = "PHB" if collectives["gpudirect_rdma"] else "LOC"
        if fabric == "roce":
            env["NCCL_IB_GID_INDEX"] = ROCE_GID_INDEX
    elif collectives["inter_node"] == "socket":
        env["NCCL_IB_DISABLE"] = "1"
        # Several threads and sockets per peer: one TCP stream rarely fills a fast NIC.
        env["NCCL_SOCKET_NTHREADS"] = "4"
        env["NCCL_NSOCKS_PERTHREAD"] = "4"
    return dict(sorted(env.items()))


def _node_affinity(plan, nodes):
    """Required: one of the planned nodes; GPU product too when the cluster reported it.

    A node's hostname is its ``kubernetes.io/hostname`` label when discovery
    recorded one, else its name in the plan.
    """
    specs = [plan.resource_spec.node(n) for n in nodes]
    hosts = sorted({s.labels.get(HOSTNAME_LABEL, s.name) for s in specs})
    expressions = [{"key": HOSTNAME_LABEL, "operator": "In", "values": hosts}]
    products = {s.labels.get(GPU_PRODUCT_LABEL) for s in specs}
    if products and None not in products:
        expressions.append({"key": GPU_PRODUCT_LABEL, "operator": "In", "values": sorted(products)})
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}}


def _one_pod_per_node(job_name, role):
    selector = {"matchLabels": {JOB_LABEL: job_name, ROLE_LABEL: role}}
    return {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": selector, "topologyKey": HOSTNAME_LABEL}]}


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


def pod_template(plan, options, job_name, role, tasks, command, container_name, port=None, nccl=False, extra_env=None):
    """The pod template of one replica kind.

    Parameters
    ----------
    plan : autodist.plan.Plan
    options : launcher.options.EmitOptions
    job_name : str
    role : str
        The replica kind in lower case (``chief``, ``worker``, ``ps``, ``launcher``).
    tasks : list of dict
        The plan's tasks this template serves (they fix node placement and GPUs).
    command : list of str
    container_name : str
    port : int, optional
        Container port to expose (TFJob's ``tfjob-port``).
    nccl : bool
        Whether the pod runs NCCL collectives: adds the NCCL variables, and
        when it holds GPUs the RDMA device, IPC_LOCK and /dev/shm.
    extra_env : dict, optional
        More environment variables.
    """
    gpus = gpus_per_task(plan, tasks)
    fabric = rdma_fabric(plan) if nccl and gpus else None
    rdma = fabric is not None
    limits = {}
    if gpus:
        limits[GPU_RESOURCE] = gpus
    if fabric == "efa":
        limits[EFA_RESOURCE] = max(len(plan.resource_spec.node(t["node"]).nics) for t in tasks)
    elif rdma:
        limits[options.rdma_resource] = 1
    env = [{"name": "AUTODIST_PLAN", "value": PLAN_PATH}]
    if nccl:
        env += [{"name": k, "value": v} for k, v in nccl_environment(plan, options).items()]
    env += [{"name": k, "value": v} for k, v in sorted((extra_env or {}).items())]
    container = {"name": container_name, "image": options.image, "command": list(command), "env": env}
    if port is not None:
        container["ports"] = [{"name": "tfjob-port", "containerPort": port}]
        # Under a collective plan a worker runs one process per replica, replica i on the port + i.
        replicas = max((len(t["devices"]) for t in tasks), default=1) if role == "worker" and collective_mode(plan) else 1
        container["ports"] += [{"name": f"replica-{i}", "containerPort": port + i} for i in range(1, replicas)]
    if limits:
        container["resources"] = {"limits": limits}
    mounts = [{"name": "autodist-plan", "mountPath": PLAN_DIR, "readOnly": True}]
    volumes = [{"name": "autodist-plan", "configMap": {"name": plan_config_map_name(job_name)}}]
    if nccl and (gpus > 1 or rdma):
        # NCCL's shared-memory transport and RDMA buffers need more than the
        # 64 MiB /dev/shm a container gets by default.
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory"}})
    if rdma:
        # Registering (pinning) memory for RDMA needs IPC_LOCK.
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    container["volumeMounts"] = mounts

    labels = {JOB_LABEL: job_name, ROLE_LABEL: role}
    annotations = {}
    spec = {"containers": [container], "volumes": volumes}
    if tasks:
        affinity = {"nodeAffinity": _node_affinity(plan, [t["node"] for t in tasks])}
        if len(tasks) > 1 and gpus:
            affinity["podAntiAffinity"] = _one_pod_per_node(job_name, role)
        spec["affinity"] = affinity
    if options.gang == "volcano":
        annotations[VOLCANO_GROUP_ANNOTATION] = job_name
    elif options.gang == "coscheduling":
        labels[COSCHEDULING_GROUP_LABEL] = job_name
    if options.gang:
        spec["schedulerName"] = SCHEDULER_NAMES[options.gang]
    metadata = {"labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def config_map(plan, options, job_name):
    """The ConfigMap that carries the plan into every pod."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": plan_config_map_name(job_name), "namespace": options.namespace, "labels": {JOB_LABEL: job_name}},
        "data": {PLAN_FILE: plan.to_json()},
    }
