"""Kubernetes manifests of real plans: strict schema checks, replicas, RDMA vs sockets, TF_CONFIG."""

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autodist.errors import InputError, LaunchError, PlacementError
from launcher.manifests import build_manifests
from launcher.options import EmitOptions
from launcher.operators import operator_podgroup
from launcher.tf_config import operator_cluster_spec, task_environments
from launcher.validate import check_custom_resource, crd_schema, validate_objects
from tests.test_plan_fixtures import allreduce_rdma_plan, allreduce_socket_plan, ps_plan  # noqa: F401  (fixtures)


def by_kind(objects):
    return {o["kind"]: o for o in objects}


def env_of(container):
    return {e["name"]: e["value"] for e in container["env"]}


def device_limits(container):
    """The container's limits on devices (GPUs, RDMA adapters), without CPU and memory."""
    return {k: v for k, v in container["resources"]["limits"].items() if k not in ("cpu", "memory")}


def gpu_limit(container):
    return int(container["resources"]["limits"].get("nvidia.com/gpu", 0))


def only_container(replica):
    (container,) = replica["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("fmt", ["tfjob", "mpijob"])
@pytest.mark.parametrize("gang", [None, "volcano", "coscheduling"])
def test_allreduce_manifests_pass_strict_validation(allreduce_rdma_plan, fmt, gang):
    objects = build_manifests(allreduce_rdma_plan, fmt, EmitOptions(gang=gang, namespace="ml"))
    kinds = [o["kind"] for o in objects]
    # no PodGroup of ours: the operator makes the one its pods join
    assert kinds == ["ConfigMap", {"tfjob": "TFJob", "mpijob": "MPIJob"}[fmt]]
    # validate again explicitly: the returned objects are exactly what passed
    assert validate_objects(copy.deepcopy(objects)) == objects
    job = objects[-1]
    replicas = job["spec"].get("tfReplicaSpecs") or job["spec"]["mpiReplicaSpecs"]
    members = sum(r["replicas"] for r in replicas.values())
    assert job["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == members
    if gang:
        # the group the operator makes from the job, and the group every pod names, are one
        group = operator_podgroup(job, gang)
        assert group["metadata"]["name"] == job["metadata"]["name"]
        for replica in replicas.values():
            meta = replica["template"]["metadata"]
            named = {**meta.get("labels", {}), **meta.get("annotations", {})}
            assert named[{"volcano": "scheduling.k8s.io/group-name",
                          "coscheduling": "scheduling.x-k8s.io/pod-group"}[gang]] == group["metadata"]["name"]
        assert group["spec"]["minMember"] == members
        assert group["spec"]["minResources"]["nvidia.com/gpu"] == "16"
        requests = [c["resources"]["requests"] for r in replicas.values() for c in r["template"]["spec"]["containers"]
                    for _ in range(r["replicas"])]
        assert group["spec"]["minResources"]["cpu"] == f"{sum(int(q['cpu']) for q in requests) * 1000}m"
        assert group["spec"]["minResources"]["memory"] == str(sum(int(q["memory"][:-2]) for q in requests) * 2**30)
        check_custom_resource(group)
    else:
        assert "minResources" not in job["spec"]["runPolicy"]["schedulingPolicy"]


def test_ps_plan_gives_chief_worker_and_ps_replicas(ps_plan):
    tfjob = by_kind(build_manifests(ps_plan, "tfjob"))["TFJob"]
    specs = tfjob["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in specs.items()} == {"Chief": 1, "Worker": 2, "PS": 2}
    for replica in specs.values():
        container = only_container(replica)
        assert container["name"] == "tensorflow"
        assert container["command"] == ["autodist", "worker", "--plan", "/etc/autodist/plan.json"]
        assert not any(k.startswith("NCCL_") for k in env_of(container))
        assert replica["restartPolicy"] == "OnFailure"  # a PS plan's worker comes back alone
    assert gpu_limit(only_container(specs["Worker"])) == 8
    assert "nvidia.com/gpu" not in only_container(specs["PS"])["resources"]["limits"]
    # preset node names exist in no cluster: the PS pods go beside the workers, one per node, as planned
    assert {t["node"] for t in ps_plan.tasks_of("ps")} <= {t["node"] for t in ps_plan.tasks_of("worker")}
    affinity = specs["PS"]["template"]["spec"]["affinity"]
    assert "nodeAffinity" not in affinity
    near = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert near == [{"labelSelector": {"matchLabels": {"autodist.io/job": "embedding", "autodist.io/role": "worker"}},
                     "topologyKey": "kubernetes.io/hostname"}]
    away = affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert away[0]["labelSelector"]["matchLabels"]["autodist.io/role"] == "ps"


def test_ps_plan_cannot_be_an_mpijob(ps_plan):
    with pytest.raises(LaunchError, match="allreduce plans only"):
        build_manifests(ps_plan, "mpijob")


def test_allreduce_on_rdma_cluster_one_pod_per_node_with_rdma_settings(allreduce_rdma_plan):
    objects = build_manifests(allreduce_rdma_plan, "tfjob", EmitOptions(rdma_resource="rdma/hca_shared_devices_a"))
    specs = by_kind(objects)["TFJob"]["spec"]["tfReplicaSpecs"]
    assert list(specs) == ["Worker"]
    worker = specs["Worker"]
    assert worker["replicas"] == len(allreduce_rdma_plan.resource_spec.nodes)
    pod = worker["template"]["spec"]
    container = only_container(worker)
    # quantities are strings: server-side apply refuses integers in a ResourceList
    assert device_limits(container) == {"nvidia.com/gpu": "8", "rdma/hca_shared_devices_a": "1"}
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert worker["restartPolicy"] == "ExitCode"  # the ring restarts whole
    env = env_of(container)
    # exact names, one adapter per NDR NIC of a DGX H100 node: a bare "mlx5" prefix also matches Ethernet ports
    assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{i}" for i in range(8))
    assert env["NCCL_NET_GDR_LEVEL"] == "PHB"  # the DGX preset has GPUDirect RDMA
    assert "NCCL_IB_GID_INDEX" not in env  # InfiniBand, not RoCE
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["topologyKey"] == "kubernetes.io/hostname"
    # one process per GPU replica, replica i on the TF port + i
    ports = [(p["name"], p["containerPort"]) for p in container["ports"]]
    assert ports == [("tfjob-port", 2222)] + [(f"replica-{i}", 2222 + i) for i in range(1, 8)]


def test_allreduce_without_rdma_uses_socket_settings(allreduce_socket_plan):
    objects = build_manifests(allreduce_socket_plan, "tfjob", EmitOptions(socket_ifname="eth0"))
    container = only_container(by_kind(objects)["TFJob"]["spec"]["tfReplicaSpecs"]["Worker"])
    env = env_of(container)
    assert env["NCCL_IB_DISABLE"] == "1" and env["NCCL_SOCKET_IFNAME"] == "eth0"
    assert int(env["NCCL_SOCKET_NTHREADS"]) * int(env["NCCL_NSOCKS_PERTHREAD"]) <= 64
    assert "NCCL_IB_HCA" not in env and "securityContext" not in container
    assert device_limits(container) == {"nvidia.com/gpu": "8"}


def test_sub_group_collectives_get_their_nccl_settings(allreduce_rdma_plan, allreduce_socket_plan, mlp_graph):
    """A hierarchical plan's collectives inside a node stay on NVLink peer-to-peer (p3: NVLink too), its groups
    across the nodes each on its own NIC; a master plan needs no rail; a ring plan, or hierarchical on one node
    (where it runs as the ring), gets neither."""
    from tests.test_plan_fixtures import allreduce_strategy, cluster, cost_model
    from autodist.plan import Plan
    from placement import simulate

    def env(plan):
        objects = build_manifests(plan, "tfjob")
        return env_of(only_container(by_kind(objects)["TFJob"]["spec"]["tfReplicaSpecs"]["Worker"]))

    def plan_of(preset, algorithm):
        spec = cluster(preset)
        strategy = allreduce_strategy(mlp_graph, spec, algorithm)
        return Plan.from_strategy(mlp_graph, spec, strategy, simulate(mlp_graph, spec, strategy, cost_model()),
                                  cost_model().id, 0)

    for plan in (allreduce_rdma_plan, allreduce_socket_plan):
        assert {b["algorithm"] for b in plan.collectives["buckets"]} == {"hierarchical"}
        assert env(plan)["NCCL_P2P_LEVEL"] == "NVL" and env(plan)["NCCL_CROSS_NIC"] == "0"
    master = env(plan_of("dgx-h100:2", "master"))
    assert master["NCCL_P2P_LEVEL"] == "NVL" and "NCCL_CROSS_NIC" not in master
    for plan in (plan_of("dgx-h100:2", "ring"), plan_of("dgx-h100", "hierarchical")):
        assert not {"NCCL_P2P_LEVEL", "NCCL_CROSS_NIC"} & set(env(plan))


def test_mpijob_runs_one_autodist_worker_per_gpu(allreduce_rdma_plan):
    mpijob = by_kind(build_manifests(allreduce_rdma_plan, "mpijob"))["MPIJob"]
    spec = mpijob["spec"]
    assert spec["slotsPerWorker"] == 8
    assert {k: v["replicas"] for k, v in spec["mpiReplicaSpecs"].items()} == {"Launcher": 1, "Worker": 2}
    launcher = only_container(spec["mpiReplicaSpecs"]["Launcher"])
    assert launcher["command"][:4] == ["mpirun", "--allow-run-as-root", "-np", "16"]
    assert device_limits(launcher) == {}  # the launcher holds no GPU and no RDMA device
    assert launcher["command"][-4:] == ["autodist", "worker", "--plan", "/etc/autodist/plan.json"]
    env = env_of(launcher)
    for name in env:
        if name.startswith("NCCL_"):
            assert launcher["command"][launcher["command"].index(name) - 1] == "-x"


@pytest.mark.parametrize("plan_fixture", ["ps_plan", "allreduce_rdma_plan"])
def test_tf_config_agrees_with_manifest_replicas(request, plan_fixture):
    plan = request.getfixturevalue(plan_fixture)
    tfjob = by_kind(build_manifests(plan, "tfjob", EmitOptions(namespace="team-a")))["TFJob"]
    expected = operator_cluster_spec(tfjob)
    envs = task_environments(plan, namespace="team-a")
    assert len(envs) == sum(r["replicas"] for r in tfjob["spec"]["tfReplicaSpecs"].values())
    import json

    for (job, index), env in envs.items():
        config = json.loads(env["TF_CONFIG"])
        assert config["cluster"] == expected
        assert config["task"] == {"type": job, "index": index}
        assert index < tfjob["spec"]["tfReplicaSpecs"][job.capitalize() if job != "ps" else "PS"]["replicas"]


@pytest.mark.parametrize(
    "path, value",
    [
        (("spec", "tfReplicaSpecs", "Worker", "template", "spec", "containers", 0, "gpuCount"), 8),
        (("spec", "runPolicy", "schedulingPolicy", "minMembers"), 2),
        (("spec", "tfReplicaSpecs", "Worker", "replica"), 2),
    ],
)
def test_validator_rejects_unknown_fields(allreduce_rdma_plan, path, value):
    objects = build_manifests(allreduce_rdma_plan, "tfjob")
    broken = copy.deepcopy(objects)
    node = broken[-1]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(LaunchError, match=f"'{path[-1]}' was unexpected"):
        validate_objects(broken)


def test_validator_checks_pod_templates_and_operator_rules(allreduce_rdma_plan, ps_plan):
    objects = build_manifests(allreduce_rdma_plan, "tfjob")
    wrong_type = copy.deepcopy(objects)
    wrong_type[-1]["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "x"
    with pytest.raises(LaunchError, match="containerPort"):
        validate_objects(wrong_type)
    renamed = copy.deepcopy(objects)
    renamed[-1]["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "main"
    with pytest.raises(LaunchError, match="no container named 'tensorflow'"):
        validate_objects(renamed)
    two_chiefs = copy.deepcopy(build_manifests(ps_plan, "tfjob"))
    two_chiefs[-1]["spec"]["tfReplicaSpecs"]["Chief"]["replicas"] = 2
    with pytest.raises(LaunchError, match="at most 1"):
        validate_objects(two_chiefs)
    bad_name = copy.deepcopy(objects)
    bad_name[-1]["metadata"]["name"] = "Bad_Name"
    with pytest.raises(LaunchError, match="job name 'Bad_Name' is not a DNS-1035 label"):
        validate_objects(bad_name)
    mpi = copy.deepcopy(build_manifests(allreduce_rdma_plan, "mpijob"))
    mpi[-1]["spec"]["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] = "Always"
    with pytest.raises(LaunchError, match="restartPolicy 'Always' is not allowed"):
        validate_objects(mpi)


def test_crd_conversion_follows_sources_md():
    schema = crd_schema("kubeflow.org/v1", "TFJob")
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert schema["additionalProperties"] is False
    replica = schema["properties"]["spec"]["properties"]["tfReplicaSpecs"]["additionalProperties"]
    limits = replica["properties"]["template"]["properties"]["spec"]["properties"]["containers"]["items"]
    limits = limits["properties"]["resources"]["properties"]["limits"]["additionalProperties"]
    assert limits["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    podgroup = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": {"name": "g"}}
    check_custom_resource({**podgroup, "spec": {"minMember": 2}})
    with pytest.raises(LaunchError, match="minMember"):
        check_custom_resource({**podgroup, "spec": {"minMember": "two"}})


@pytest.mark.parametrize(
    "options, message",
    [
        (EmitOptions(image="Not An Image"), "not a valid container image"),
        (EmitOptions(namespace="Team_A"), "--namespace: 'Team_A' is not a DNS-1123 label"),
        (EmitOptions(name="9lives"), "--name: '9lives' is not a DNS-1035 label"),
        (EmitOptions(name="a" * 60), "too long"),
    ],
)
def test_bad_options_fail_before_building(allreduce_rdma_plan, options, message):
    with pytest.raises(InputError, match=message):
        build_manifests(allreduce_rdma_plan, "tfjob", options)


def _roce_cluster():
    """The DGX preset with its InfiniBand NICs swapped for 200 GbE RoCE (no GPUDirect)."""
    from dataclasses import replace

    from autodist.resource_spec import ResourceSpec
    from autodist.resource_spec.presets import LINK_PRESETS
    from tests.test_plan_fixtures import cluster

    base = cluster("dgx-h100:2")
    nodes = [replace(n, nics=[LINK_PRESETS["roce-200g"]] * len(n.nics)) for n in base.nodes]
    return ResourceSpec(nodes, name="dgx-h100-roce:2")


def _allreduce_plan(graph_item, resource_spec, replicas=None, algorithm="hierarchical"):
    from placement import simulate

    from autodist.plan import Plan
    from tests.test_plan_fixtures import allreduce_strategy, cost_model

    strategy = allreduce_strategy(graph_item, resource_spec, algorithm)
    if replicas is not None:
        strategy.replicas = replicas
    prediction = simulate(graph_item, resource_spec, strategy, cost_model())
    return Plan.from_strategy(graph_item, resource_spec, strategy, prediction, cost_model().id, 0)


def test_roce_cluster_gets_gid_index_and_no_gpudirect(mlp_graph):
    plan = _allreduce_plan(mlp_graph, _roce_cluster())
    container = only_container(by_kind(build_manifests(plan, "tfjob"))["TFJob"]["spec"]["tfReplicaSpecs"]["Worker"])
    env = env_of(container)
    assert env["NCCL_IB_GID_INDEX"] == "3" and env["NCCL_IB_DISABLE"] == "0"
    assert env["NCCL_NET_GDR_LEVEL"] == "LOC"
    assert container["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"


def test_efa_cluster_gets_libfabric_settings(mlp_graph):
    from tests.test_plan_fixtures import cluster

    plan = _allreduce_plan(mlp_graph, cluster("p4d.24xlarge:2"))
    assert plan.collectives["inter_node"] == "rdma"
    container = only_container(by_kind(build_manifests(plan, "mpijob"))["MPIJob"]["spec"]["mpiReplicaSpecs"]["Worker"])
    env = env_of(container)
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    assert "NCCL_IB_HCA" not in env
    assert device_limits(container) == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "4"}
    assert container["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]


def test_uneven_gpu_counts_request_the_most_in_tfjob_but_not_mpijob(mlp_graph):
    from tests.test_plan_fixtures import cluster

    spec = cluster("p3.16xlarge:2")
    replicas = [[f"{spec.nodes[0].name}/GPU:{i}"] for i in range(8)] + [[f"{spec.nodes[1].name}/GPU:{i}"] for i in range(4)]
    with pytest.raises(PlacementError, match="hierarchical allreduce needs as many replicas on every node, got 8, 4"):
        _allreduce_plan(mlp_graph, spec, replicas)
    plan = _allreduce_plan(mlp_graph, spec, replicas, "master")  # master runs on uneven nodes
    worker = by_kind(build_manifests(plan, "tfjob"))["TFJob"]["spec"]["tfReplicaSpecs"]["Worker"]
    assert gpu_limit(only_container(worker)) == 8
    assert plan.device_string(f"{spec.nodes[1].name}/GPU:3") == "/job:worker/task:1/device:GPU:3"
    with pytest.raises(LaunchError, match=r"different GPU counts \[4, 8\]"):
        build_manifests(plan, "mpijob")


def test_discovered_nodes_pin_hostnames_and_gpu_product(mlp_graph):
    """Nodes as the Kubernetes API lists them (a NodeList's items; no API server runs here)."""
    from autodist.resource_spec.discovery import nodes_to_spec

    def node(name, host):
        labels = {
            "kubernetes.io/hostname": host,
            "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            "feature.node.kubernetes.io/rdma.available": "true",
            "autodist.io/nic-kind": "infiniband",
            "autodist.io/nic-speed": "400Gb/s",
            "autodist.io/nic-count": "8",
            "autodist.io/gpudirect": "true",
        }
        status = {"allocatable": {"nvidia.com/gpu": "8", "cpu": "224", "memory": "2Ti"}, "conditions": [{"type": "Ready", "status": "True"}]}
        return {"metadata": {"name": name, "labels": labels}, "status": {**status, "capacity": status["allocatable"]}}

    spec = nodes_to_spec([node("gpu-a", "gpu-a.example"), node("gpu-b", "gpu-b.example")])
    plan = _allreduce_plan(mlp_graph, spec)
    pod = by_kind(build_manifests(plan, "tfjob"))["TFJob"]["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-a.example", "gpu-b.example"]},
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]},
            ]
        }
    ]
    assert env_of(pod["containers"][0])["NCCL_IB_DISABLE"] == "0"


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_manifest_property(mlp_graph, data):
    """Random valid strategies of the real graph: the TFJob validates and agrees with every TF_CONFIG."""
    from tests.test_plan_fixtures import draw_plan

    plan, _ = draw_plan(data, mlp_graph)
    tfjob = by_kind(build_manifests(plan, "tfjob"))["TFJob"]
    expected = operator_cluster_spec(tfjob)
    for task in plan.tasks:
        assert plan.tf_config(task["job"], task["index"], namespace="default")["cluster"] == expected
    spec = plan.resource_spec
    gpus = [sum(spec.device(d).kind == "GPU" for d in t["devices"]) for t in plan.tasks_of("worker")]
    assert gpu_limit(only_container(tfjob["spec"]["tfReplicaSpecs"]["Worker"])) == max(gpus)


def test_missing_crd_schemas_are_one_clear_error(allreduce_rdma_plan, tmp_path, monkeypatch):
    monkeypatch.setenv("AUTODIST_K8S_SCHEMAS", str(tmp_path))
    crd_schema.cache_clear()
    try:
        with pytest.raises(LaunchError, match=r"kubeflow.org_tfjobs.yaml: cannot read CRD schema .*AUTODIST_K8S_SCHEMAS"):
            build_manifests(allreduce_rdma_plan, "tfjob")
    finally:
        crd_schema.cache_clear()


def test_crd_schemas_ship_with_the_package(monkeypatch):
    """Without $AUTODIST_K8S_SCHEMAS the package's own copy is read; every CRD file is there."""
    import os

    import launcher
    from launcher.validate import CRD_FILES, schemas_dir

    monkeypatch.delenv("AUTODIST_K8S_SCHEMAS", raising=False)
    folder = schemas_dir()
    assert folder == os.path.join(os.path.dirname(launcher.__file__), "k8s_schemas")
    for filename in CRD_FILES.values():
        assert os.path.isfile(os.path.join(folder, filename))
    assert "Apache-2.0" in open(os.path.join(folder, "SOURCES.md"), encoding="utf-8").read()
