"""Emitted jobs read as the operators read them (launcher.operators): what each pod gets once an operator made it.

Real plans of real captured graphs, simulated on the presets.  Each test
here fails on the manifests before issue 43: a rank that could not read the
hostfile, two PodGroups, a chief asking for no CPU, a CPU worker on 4 of 80
cores, integer quantities, NCCL settings in a CPU job.
"""

import json
import shlex

import pytest

from launcher.manifests import build_manifests
from launcher.operators import mounted_file, mpijob_hostfile, mpijob_pods, operator_podgroup, tfjob_pods
from launcher.resources import NODE_RESERVED_CPUS, SERVICE_CPUS, quantity_value
from launcher.options import EmitOptions
from launcher.runtime.mpi import DEFAULT_HOSTFILE, read_hostfile
from tests.test_plan_fixtures import allreduce_rdma_plan, build_plan, ps_plan  # noqa: F401  (fixtures)


@pytest.fixture(scope="module")
def cpu_ps_plan(embedding_graph):
    return build_plan(embedding_graph, "cpu-2s-25g:2", "ps")


@pytest.fixture(scope="module")
def cpu_allreduce_plan(mlp_graph):
    return build_plan(mlp_graph, "cpu-2s-25g:2", "allreduce")


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_every_mpi_rank_can_read_the_hostfile_the_operator_writes(allreduce_rdma_plan, tmp_path):
    job = build_manifests(allreduce_rdma_plan, "mpijob")[-1]
    pods = mpijob_pods(job)
    workers = [p for p in pods if p["metadata"]["name"] != f"{job['metadata']['name']}-launcher"]
    assert len(workers) == 2
    for pod in pods:  # the launcher (operator's mount) and every worker (the ranks run there)
        found = mounted_file(pod, pod["spec"]["containers"][0], DEFAULT_HOSTFILE)
        assert found is not None, pod["metadata"]["name"]
        volume, key = found
        assert volume["configMap"]["name"] == "mlp-config" and key == "hostfile"
    # what the rank reads from it: one host per worker pod, a slot per GPU
    path = tmp_path / "hostfile"
    path.write_text(mpijob_hostfile(job))
    assert read_hostfile(str(path)) == [(f"mlp-worker-{i}.mlp.default.svc", 8) for i in range(2)]
    hosts = {f"{p['spec']['hostname']}.{p['spec']['subdomain']}.default.svc" for p in workers}
    assert {h for h, _ in read_hostfile(str(path))} == hosts


def test_mpijob_launcher_waits_for_workers_and_forwards_path(allreduce_rdma_plan):
    job = build_manifests(allreduce_rdma_plan, "mpijob")[-1]
    assert job["spec"]["launcherCreationPolicy"] == "WaitForWorkersReady"
    command = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"]
    text = shlex.join(command)
    for name in ("PATH", "LD_LIBRARY_PATH", "AUTODIST_PLAN", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME"):
        assert f"-x {name} " in text


@pytest.mark.parametrize("fmt", ["tfjob", "mpijob"])
@pytest.mark.parametrize("gang", ["volcano", "coscheduling"])
def test_one_podgroup_the_one_every_pod_joins_with_what_they_request(allreduce_rdma_plan, fmt, gang):
    objects = build_manifests(allreduce_rdma_plan, fmt, EmitOptions(gang=gang, queue="q" if gang == "volcano" else None))
    assert not [o for o in objects if o["kind"] == "PodGroup"]  # the operator makes it
    job = objects[-1]
    group = operator_podgroup(job, gang)
    pods = (tfjob_pods if fmt == "tfjob" else mpijob_pods)(job, gang)
    for pod in pods:
        meta = pod["metadata"]
        named = meta.get("annotations", {}).get("scheduling.k8s.io/group-name") or meta["labels"].get("scheduling.x-k8s.io/pod-group")
        assert named == group["metadata"]["name"]
    assert group["spec"]["minMember"] == len(pods)
    totals = {}
    for pod in pods:  # requests, and extended resources (GPUs, RDMA devices) by their limits, as Kubernetes takes them
        for container in pod["spec"]["containers"]:
            resources = container["resources"]
            wanted = {**{k: v for k, v in resources["limits"].items() if "/" in k}, **resources["requests"]}
            for name, value in wanted.items():
                totals[name] = totals.get(name, 0) + quantity_value(value)
    assert {k: quantity_value(v) for k, v in group["spec"]["minResources"].items()} == totals
    assert totals["nvidia.com/gpu"] == 16 and totals["rdma/rdma_shared_device_a"] == 2
    if gang == "volcano":
        assert group["spec"]["queue"] == "q"


def test_ps_chief_and_ps_tasks_request_cpu(ps_plan):
    job = build_manifests(ps_plan, "tfjob")[-1]
    for rtype in ("Chief", "PS"):
        requests = job["spec"]["tfReplicaSpecs"][rtype]["template"]["spec"]["containers"][0]["resources"]["requests"]
        assert quantity_value(requests["cpu"]) == SERVICE_CPUS


def test_cpu_worker_requests_its_nodes_cores_less_the_reserve_and_its_neighbours(cpu_allreduce_plan, cpu_ps_plan):
    cores = 80  # cpu-2s-25g: two Xeon Platinum 8380, the CPU the plan prices the worker on
    job = build_manifests(cpu_allreduce_plan, "tfjob")[-1]
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert worker["resources"]["requests"]["cpu"] == str(cores - NODE_RESERVED_CPUS)
    # a PS plan's node 0 also holds the chief and a PS task: the worker there gets the rest
    job = build_manifests(cpu_ps_plan, "tfjob")[-1]
    specs = job["spec"]["tfReplicaSpecs"]
    worker = specs["Worker"]["template"]["spec"]["containers"][0]
    node0 = [t for t in cpu_ps_plan.tasks if t["node"] == cpu_ps_plan.tasks_of("worker")[0]["node"]]
    others = len(node0) - 1
    assert quantity_value(worker["resources"]["requests"]["cpu"]) >= cores - NODE_RESERVED_CPUS - others * SERVICE_CPUS
    for replica in specs.values():
        assert quantity_value(replica["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]) > 0


def test_cpu_jobs_carry_no_nccl_settings(cpu_allreduce_plan):
    for fmt in ("tfjob", "mpijob"):
        job = build_manifests(cpu_allreduce_plan, fmt)[-1]
        replicas = job["spec"].get("tfReplicaSpecs") or job["spec"]["mpiReplicaSpecs"]
        for replica in replicas.values():
            container = replica["template"]["spec"]["containers"][0]
            assert not any(k.startswith("NCCL_") for k in env_of(container))
            assert "NCCL_" not in " ".join(container["command"])


def test_nccl_names_adapters_exactly_and_skips_cni_interfaces(allreduce_rdma_plan):
    job = build_manifests(allreduce_rdma_plan, "tfjob", EmitOptions(network="host"))[-1]
    env = env_of(job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0])
    assert env["NCCL_IB_HCA"].startswith("=")  # exact names: a prefix also matches Ethernet-only ports
    excluded = env["NCCL_SOCKET_IFNAME"]
    assert excluded.startswith("^")
    for interface in ("lo", "docker0", "cni0", "flannel.1", "cali1a2b3c", "veth12ab"):
        assert any(interface.startswith(prefix) for prefix in excluded[1:].split(","))
    for interface in ("eth0", "ens5", "bond0", "ib0"):
        assert not any(interface.startswith(prefix) for prefix in excluded[1:].split(","))
    given = build_manifests(allreduce_rdma_plan, "tfjob", EmitOptions(ib_hca="=mlx5_0,mlx5_3"))[-1]
    assert env_of(given["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0])["NCCL_IB_HCA"] == "=mlx5_0,mlx5_3"


@pytest.mark.parametrize("fmt", ["tfjob", "mpijob"])
def test_every_quantity_is_a_string(allreduce_rdma_plan, fmt):
    job = build_manifests(allreduce_rdma_plan, fmt, EmitOptions(gang="volcano"))[-1]
    replicas = job["spec"].get("tfReplicaSpecs") or job["spec"]["mpiReplicaSpecs"]
    lists = [job["spec"]["runPolicy"]["schedulingPolicy"]["minResources"]]
    for replica in replicas.values():
        for container in replica["template"]["spec"]["containers"] + replica["template"]["spec"]["initContainers"]:
            lists += [container["resources"]["requests"], container["resources"]["limits"]]
    assert all(isinstance(v, str) for resources in lists for v in resources.values())


def test_tfjob_pods_get_the_plans_tf_config(ps_plan):
    job = build_manifests(ps_plan, "tfjob")[-1]
    for pod in tfjob_pods(job):
        config = json.loads(env_of(pod["spec"]["containers"][0])["TF_CONFIG"])
        plan_config = ps_plan.tf_config(config["task"]["type"], config["task"]["index"], namespace="default")
        assert config["cluster"] == plan_config["cluster"]
        assert pod["spec"]["restartPolicy"] == "OnFailure"


def test_trainjob_pods_get_the_plans_tf_config_from_their_index(allreduce_rdma_plan):
    """The pod command's shell, run for real on each pod's variables, exports the plan's TF_CONFIG."""
    import subprocess

    from launcher.operators import trainjob_pods
    from launcher.trainjob import ENTRY

    objects = build_manifests(allreduce_rdma_plan, "trainjob", EmitOptions(namespace="ml"))
    assert [o["kind"] for o in objects] == ["ClusterTrainingRuntime", "ConfigMap", "TrainJob"]
    pods = trainjob_pods(objects)
    addresses = {"worker": [f"{p['spec']['hostname']}.{p['spec']['subdomain']}.ml.svc:2222" for p in pods]}
    tf_config_step = ENTRY.split(" && ", 1)[1]  # after the plan's unpacking
    for pod in pods:
        env = env_of(pod["spec"]["containers"][0])
        out = subprocess.run(["sh", "-c", tf_config_step, "autodist-worker", "printenv", "TF_CONFIG"],
                             env=env, capture_output=True, text=True, check=True).stdout
        index = int(env["JOB_COMPLETION_INDEX"])
        assert json.loads(out) == allreduce_rdma_plan.tf_config("worker", index, addresses=addresses)
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "8" and pod["spec"]["restartPolicy"] == "Never"


def test_trainjob_refuses_what_it_cannot_carry(ps_plan, allreduce_rdma_plan):
    from autodist.errors import InputError, LaunchError

    with pytest.raises(LaunchError, match="emit a TFJob"):
        build_manifests(ps_plan, "trainjob")
    with pytest.raises(InputError, match="--network"):
        build_manifests(allreduce_rdma_plan, "trainjob", EmitOptions(network="host"))
    named = build_manifests(allreduce_rdma_plan, "trainjob", EmitOptions(runtime="tf-runtime", gang="volcano"))
    assert [o["kind"] for o in named] == ["ConfigMap", "TrainJob"]  # the cluster's runtime, not ours
    assert named[-1]["spec"]["runtimeRef"]["name"] == "tf-runtime"
    ours = build_manifests(allreduce_rdma_plan, "trainjob", EmitOptions(gang="coscheduling"))
    assert ours[0]["metadata"]["name"] == "autodist-tensorflow-coscheduling"
    assert ours[0]["spec"]["podGroupPolicy"] == {"coscheduling": {}}


def test_arena_options_reach_the_trainjob_pods(allreduce_rdma_plan):
    from launcher.operators import trainjob_pods

    options = EmitOptions(script="train.py", data=("imagenet:/data",), image_pull_secrets=("regcred",), env=("EPOCHS=3",),
                          selector=("pool=gpu",), tolerations=("nvidia.com/gpu:NoSchedule",), log_dir="/data/logs",
                          cpu="40", memory="900Gi")
    for pod in trainjob_pods(build_manifests(allreduce_rdma_plan, "trainjob", options)):
        spec = pod["spec"]
        container = spec["containers"][0]
        assert container["command"][-1] == "/workspace/train.py"
        assert {"name": "data-0", "mountPath": "/data"} in container["volumeMounts"]
        assert env_of(container)["EPOCHS"] == "3" and env_of(container)["AUTODIST_LOG_DIR"] == "/data/logs"
        assert spec["nodeSelector"]["pool"] == "gpu" and spec["imagePullSecrets"] == [{"name": "regcred"}]
        assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        assert container["resources"]["requests"] == {"cpu": "40", "memory": "900Gi"}
