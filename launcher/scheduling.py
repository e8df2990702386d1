"""Where pods may run: node affinity, node selectors, pod (anti-)affinity, gang membership.

Node names in a plan are real only when the cluster said so: nodes read from
Kubernetes (``--from-kubernetes``) carry their ``kubernetes.io/hostname``
label, and a cluster file may give each node that label.  Pods of such nodes
are pinned to them by node affinity.  Preset and cluster-file names
(``node-0``) exist nowhere else, so those pods are placed by the nodes'
device labels (``nvidia.com/gpu.product``) and by their relation to each
other: one GPU worker pod per node, and every other task kind next to the
workers or away from them, as the plan puts it.
"""

from __future__ import annotations

from autodist.errors import LaunchError

HOSTNAME_LABEL = "kubernetes.io/hostname"
# Set by NVIDIA GPU feature discovery on every GPU node, e.g. "NVIDIA-H100-80GB-HBM3".
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
JOB_LABEL = "autodist.io/job"
ROLE_LABEL = "autodist.io/role"
# On objects autodist emits that belong to no one job (a TrainJob's runtime).
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"

# Where a Volcano or coscheduling PodGroup is named on each pod.
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
SCHEDULER_NAMES = {"volcano": "volcano", "coscheduling": "scheduler-plugins-scheduler"}


def real_hostnames(plan, nodes):
    """The nodes' ``kubernetes.io/hostname`` labels when every one has it, else None.

    Raises LaunchError when two nodes of the plan carry the same hostname (a
    cluster-file node group that gives all its nodes one label): their pods
    could never all be placed.
    """
    hosts = {n: plan.resource_spec.node(n).labels.get(HOSTNAME_LABEL) for n in sorted(set(nodes))}
    if not hosts or None in hosts.values():
        return None
    owners = {}
    for node, host in hosts.items():
        if host in owners:
            raise LaunchError(f"nodes {owners[host]!r} and {node!r} both carry {HOSTNAME_LABEL}={host}",
                              source=plan.where)
        owners[host] = node
    return sorted(owners)


def _shared_label(plan, nodes, key):
    values = {plan.resource_spec.node(n).labels.get(key) for n in nodes}
    return values.pop() if len(values) == 1 and None not in values else None


def _node_affinity(plan, nodes):
    """Required: the planned nodes by hostname, and their GPU products when the cluster reported them."""
    expressions = [{"key": HOSTNAME_LABEL, "operator": "In", "values": real_hostnames(plan, nodes)}]
    products = {plan.resource_spec.node(n).labels.get(GPU_PRODUCT_LABEL) for n in nodes}
    if None not in products:
        expressions.append({"key": GPU_PRODUCT_LABEL, "operator": "In", "values": sorted(products)})
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}}


def _same_node_term(job_name, role):
    return {"labelSelector": {"matchLabels": {JOB_LABEL: job_name, ROLE_LABEL: role}}, "topologyKey": HOSTNAME_LABEL}


def node_selector(plan, options, tasks):
    """The user's ``--selector`` labels, and the GPU product the planned nodes share when they have one."""
    from launcher.options import parse_selector

    selector = {}
    nodes = [t["node"] for t in tasks]
    if nodes and real_hostnames(plan, nodes) is None:
        product = _shared_label(plan, nodes, GPU_PRODUCT_LABEL)
        if product:
            selector[GPU_PRODUCT_LABEL] = product
    selector.update(parse_selector(text) for text in options.selector)
    return dict(sorted(selector.items()))


def affinity(plan, job_name, role, tasks, gpus):
    """The pod affinity of one replica kind, or None.

    With real node names: node affinity to the planned nodes, plus one pod
    per node among several GPU pods.  Otherwise, for pods of ``role``:

    - several tasks on distinct nodes: at most one such pod per node;
    - a non-worker kind: on a node with a worker pod when every task of it
      shares a node with a worker in the plan, on a node without one when
      none does.
    """
    nodes = [t["node"] for t in tasks]
    if not nodes:
        return None
    out = {}
    anti, near = [], []
    if real_hostnames(plan, nodes) is not None:
        out["nodeAffinity"] = _node_affinity(plan, nodes)
        if len(tasks) > 1 and gpus:
            anti.append(_same_node_term(job_name, role))
    else:
        if len(tasks) > 1 and len(set(nodes)) == len(nodes):
            anti.append(_same_node_term(job_name, role))
        worker_nodes = {t["node"] for t in plan.tasks_of("worker")}
        if role != "worker" and worker_nodes:
            beside = [n in worker_nodes for n in nodes]
            if all(beside):
                near.append(_same_node_term(job_name, "worker"))
            elif not any(beside):
                anti.append(_same_node_term(job_name, "worker"))
    if near:
        out["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": near}
    if anti:
        out["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": anti}
    return out or None


def gang_membership(options, job_name):
    """(labels, annotations, scheduler name) that put a pod in the job's PodGroup.

    The group is the one the operator makes, named after the job: with gang
    scheduling on, the training operator (kubeflow/trainer release-1.9,
    pkg/controller.v1/control/podgroup_control.go) and mpi-operator v2
    (kubeflow/mpi-operator pkg/controller/podgroup.go, decoratePodTemplateSpec)
    both write the job's name into this annotation (Volcano) or label
    (coscheduling) of every pod, so the templates say the same.
    """
    if not options.gang:
        return {}, {}, None
    if options.gang == "volcano":
        return {}, {VOLCANO_GROUP_ANNOTATION: job_name}, SCHEDULER_NAMES["volcano"]
    return {COSCHEDULING_GROUP_LABEL: job_name}, {}, SCHEDULER_NAMES["coscheduling"]


def min_resources(replicas):
    """What every pod of the job asks for together, as quantity strings: CPU (millicores), memory (bytes) and
    every extended resource (GPUs, RDMA devices: their limits, which Kubernetes takes as their requests)."""
    from launcher.resources import quantity_value

    totals = {"cpu": 0, "memory": 0}
    for replica in replicas.values():
        for container in replica["template"]["spec"]["containers"]:
            resources = container["resources"]
            wanted = {**{k: v for k, v in resources["limits"].items() if "/" in k}, **resources["requests"]}
            for name, value in wanted.items():
                totals[name] = totals.get(name, 0) + replica["replicas"] * quantity_value(value)
    return {name: f"{int(value * 1000)}m" if name == "cpu" else str(int(value)) for name, value in totals.items()}


def run_policy(options, replicas):
    """The operator's ``runPolicy``: retries, deadline, clean-up, and the gang of every pod of ``replicas``.

    With ``--gang`` autodist emits no PodGroup: the operator makes the one its
    pods join, named after the job, from ``schedulingPolicy`` (minAvailable,
    queue, priorityClass, and minResources, which both operators copy into
    the group as given: kubeflow/trainer release-1.9
    pkg/controller.v1/common/job.go, kubeflow/mpi-operator
    pkg/controller/podgroup.go calculatePGMinResources).  A PodGroup of our
    own would be a second one; one named after the job would make
    mpi-operator stop (it refuses a PodGroup that its MPIJob does not own).
    """
    scheduling = {"minAvailable": sum(r["replicas"] for r in replicas.values())}
    if options.queue:
        scheduling["queue"] = options.queue
    if options.priority:
        scheduling["priorityClass"] = options.priority
    if options.gang:
        scheduling["minResources"] = min_resources(replicas)
    return {
        "cleanPodPolicy": "Running",
        "backoffLimit": options.backoff_limit,
        "activeDeadlineSeconds": options.running_timeout,
        "ttlSecondsAfterFinished": options.ttl_after_finished,
        "schedulingPolicy": scheduling,
    }
