"""Manifests that run as emitted: placement, resources, failure semantics, plan size, options, the image.

Every plan here is a real captured graph with a strategy simulated for real
on the presets; every emitted object is validated with the real CRD schemas
and kubernetes-validate by build_manifests itself.
"""

import copy
import json
import re

import pytest

from autodist.errors import InputError, LaunchError
from launcher import plan_data
from launcher.manifests import MAX_OBJECT_BYTES, build_manifests, object_bytes
from launcher.options import EmitOptions
from launcher.plan_data import read_plan_json
from launcher.validate import validate_objects
from tests.test_plan_fixtures import allreduce_rdma_plan, allreduce_socket_plan, build_plan, ps_plan  # noqa: F401

PRESETS = ["dgx-h100:2", "p3.16xlarge:2", "g4dn.12xlarge:3", "p4d.24xlarge:2", "cpu-2s-25g:2"]


def replicas_of(job):
    return job["spec"].get("tfReplicaSpecs") or job["spec"]["mpiReplicaSpecs"]


def pods_of(objects):
    return [r["template"] for r in replicas_of(objects[-1]).values()]


def env_of(container):
    return {e["name"]: e["value"] for e in container["env"]}


def names_a_hostname(pod):
    """Whether the pod is pinned to a node name (node affinity or selector on kubernetes.io/hostname)."""
    spec = pod["spec"]
    if "kubernetes.io/hostname" in spec.get("nodeSelector", {}):
        return True
    terms = spec.get("affinity", {}).get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
    return any(e["key"] == "kubernetes.io/hostname" for t in terms.get("nodeSelectorTerms", []) for e in t["matchExpressions"])


def check_runnable(objects):
    """The rules every emission keeps, whatever the plan."""
    for obj in objects:
        assert object_bytes(obj) < MAX_OBJECT_BYTES
    policy = objects[-1]["spec"]["runPolicy"]
    assert policy["backoffLimit"] >= 0 and policy["activeDeadlineSeconds"] > 0 and policy["ttlSecondsAfterFinished"] > 0
    for pod in pods_of(objects):
        spec = pod["spec"]
        for container in spec["containers"] + spec["initContainers"]:
            assert set(container["resources"]["requests"]) == {"cpu", "memory"}
            assert container["resources"]["limits"]["memory"] == container["resources"]["requests"]["memory"]
        for volume in spec["volumes"]:
            if volume.get("emptyDir", {}).get("medium") == "Memory":
                assert volume["emptyDir"]["sizeLimit"]
        for container in spec["containers"]:
            if container["command"][:2] == ["autodist", "worker"] and container["command"][4:]:
                assert container["command"][4].startswith("/workspace/")  # the image's code folder, no host path


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("kind", ["allreduce", "ps"])
def test_preset_plans_schedule_with_requests_limits_and_deadlines(mlp_graph, preset, kind):
    plan = build_plan(mlp_graph, preset, kind)
    formats = ["tfjob"] + (["mpijob"] if kind == "allreduce" else [])
    for fmt in formats:
        for gang in (None, "volcano"):
            objects = build_manifests(plan, fmt, EmitOptions(gang=gang, script="train.py"))
            check_runnable(objects)
            for pod in pods_of(objects):
                assert not names_a_hostname(pod), pod["metadata"]["labels"]
            restart = {r["restartPolicy"] for r in replicas_of(objects[-1]).values()}
            if fmt == "tfjob":
                assert restart == ({"ExitCode"} if kind == "allreduce" else {"OnFailure"})


def test_worker_pods_one_per_node_without_real_names(allreduce_rdma_plan):
    worker = build_manifests(allreduce_rdma_plan, "tfjob")[-1]["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    (term,) = worker["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {"labelSelector": {"matchLabels": {"autodist.io/job": "mlp", "autodist.io/role": "worker"}},
                    "topologyKey": "kubernetes.io/hostname"}
    assert "nodeAffinity" not in worker["affinity"]


def test_gpu_product_label_becomes_a_node_selector(mlp_graph):
    """A cluster file that labels its nodes' GPUs but not their hostnames: a selector, no pinning."""
    from autodist.resource_spec.cluster_file import parse_cluster
    from tests.test_manifest import _allreduce_plan

    spec = parse_cluster("nodes:\n  - {name: gpu, count: 2, preset: dgx-h100, labels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}\n")
    pod = build_manifests(_allreduce_plan(mlp_graph, spec), "tfjob")[-1]["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    assert pod["spec"]["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert not names_a_hostname(pod)


def test_cluster_file_hostnames_are_real_names(mlp_graph):
    from autodist.resource_spec.cluster_file import parse_cluster
    from tests.test_manifest import _allreduce_plan

    spec = parse_cluster(
        "nodes:\n"
        "  - {name: a, preset: dgx-h100, labels: {kubernetes.io/hostname: gpu-a}}\n"
        "  - {name: b, preset: dgx-h100, labels: {kubernetes.io/hostname: gpu-b}}\n"
    )
    pod = build_manifests(_allreduce_plan(mlp_graph, spec), "tfjob")[-1]["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-a", "gpu-b"]}]}]


def test_one_hostname_on_several_nodes_is_refused(mlp_graph):
    from autodist.resource_spec.cluster_file import parse_cluster
    from tests.test_manifest import _allreduce_plan

    spec = parse_cluster("nodes:\n  - {name: gpu, count: 2, preset: dgx-h100, labels: {kubernetes.io/hostname: box}}\n")
    with pytest.raises(LaunchError, match="nodes 'gpu-0' and 'gpu-1' both carry kubernetes.io/hostname=box"):
        build_manifests(_allreduce_plan(mlp_graph, spec), "tfjob")


def test_resources_come_from_the_cluster_spec_and_can_be_overridden(ps_plan):
    spec = ps_plan.resource_spec
    tasks_per_node = {}
    for t in ps_plan.tasks:
        tasks_per_node[t["node"]] = tasks_per_node.get(t["node"], 0) + 1
    host = sum(d.memory_bytes for d in spec.nodes[0].devices if d.kind == "CPU")
    share = int(host * 0.8 / max(tasks_per_node.values())) // 2**30
    tfjob = build_manifests(ps_plan, "tfjob")[-1]
    worker = tfjob["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    gpus = len(ps_plan.tasks_of("worker")[0]["devices"])
    assert worker["resources"]["requests"] == {"cpu": str(4 * gpus), "memory": f"{share}Gi"}
    tfjob = build_manifests(ps_plan, "tfjob", EmitOptions(cpu="6", memory="64Gi"))[-1]
    for replica in tfjob["spec"]["tfReplicaSpecs"].values():
        resources = replica["template"]["spec"]["containers"][0]["resources"]
        assert resources["requests"] == {"cpu": "6", "memory": "64Gi"}
        assert resources["limits"]["cpu"] == "6" and resources["limits"]["memory"] == "64Gi"


@pytest.mark.parametrize("nodes", [128, 256])
def test_plans_of_1024_and_2048_gpus_emit_in_small_objects(mlp_graph, nodes):
    from autodist.plan import Plan
    from placement import simulate
    from tests.test_plan_fixtures import allreduce_strategy, cluster, cost_model

    spec = cluster(f"dgx-h100:{nodes}")
    strategy = allreduce_strategy(mlp_graph, spec)
    plan = Plan.from_strategy(mlp_graph, spec, strategy, simulate(mlp_graph, spec, strategy, cost_model()),
                              cost_model().id, 0)
    assert len(plan.resource_spec.gpus()) == 8 * nodes
    assert len(plan.to_json().encode()) > 3 * MAX_OBJECT_BYTES  # far more than kubectl apply records uncompressed
    for fmt in ("tfjob", "mpijob"):
        objects = build_manifests(plan, fmt, EmitOptions(gang="volcano"))
        check_runnable(objects)
        config_maps = [o for o in objects if o["kind"] == "ConfigMap"]
        assert read_plan_json(config_maps) == plan.to_json()


def test_plan_over_one_part_is_split_and_every_pod_mounts_all_parts(allreduce_rdma_plan, monkeypatch):
    monkeypatch.setattr(plan_data, "PART_BYTES", 256)  # a small part size, to split a small plan
    objects = build_manifests(allreduce_rdma_plan, "mpijob")
    config_maps = [o for o in objects if o["kind"] == "ConfigMap"]
    assert len(config_maps) > 2
    assert read_plan_json(config_maps) == allreduce_rdma_plan.to_json()
    for pod in pods_of(objects):
        (parts,) = [v for v in pod["spec"]["volumes"] if v["name"] == "autodist-plan-parts"]
        assert [s["configMap"]["name"] for s in parts["projected"]["sources"]] == [c["metadata"]["name"] for c in config_maps]
        (unpack,) = pod["spec"]["initContainers"]
        assert unpack["command"][-1] == "cat /etc/autodist-parts/plan.json.gz.* | gunzip > /etc/autodist/plan.json"


def test_unpack_command_rebuilds_the_plan(allreduce_rdma_plan, monkeypatch, tmp_path):
    """The init container's shell command, run here on the parts as the pod mounts them."""
    import base64
    import shutil
    import subprocess

    if not shutil.which("gunzip"):
        pytest.skip("no gunzip on this machine")
    monkeypatch.setattr(plan_data, "PART_BYTES", 256)
    parts, out = tmp_path / "parts", tmp_path / "plan"
    parts.mkdir()
    out.mkdir()
    for cm in plan_data.plan_config_maps(allreduce_rdma_plan, "default", "mlp", {}):
        for key, value in cm["binaryData"].items():
            (parts / key).write_bytes(base64.b64decode(value))
    command = plan_data.unpack_container("img")["command"][-1]
    command = command.replace(plan_data.PARTS_DIR, str(parts)).replace(plan_data.PLAN_PATH, str(out / "plan.json"))
    subprocess.run(["sh", "-c", command], check=True)
    assert (out / "plan.json").read_text() == allreduce_rdma_plan.to_json()


def test_hybrid_plan_workers_carry_no_nccl_or_rdma(mlp_graph):
    """Half the variables on a PS, half allreduced: the allreduce runs as TF ops from one client, not NCCL."""
    from autodist.plan import Plan
    from autodist.strategy import VarSync
    from placement import simulate
    from tests.test_plan_fixtures import allreduce_strategy, cluster, cost_model

    spec = cluster("dgx-h100:2")
    strategy = allreduce_strategy(mlp_graph, spec)
    strategy.ps_devices = [spec.nodes[0].devices[0].name]
    first = sorted(strategy.sync)[0]
    strategy.sync[first] = VarSync("ps", ps_tasks=(0,))
    plan = Plan.from_strategy(mlp_graph, spec, strategy, simulate(mlp_graph, spec, strategy, cost_model()),
                              cost_model().id, 0)
    assert plan.has_ps() and plan.collectives["buckets"]
    tfjob = build_manifests(plan, "tfjob", EmitOptions(network="host"))[-1]
    for replica in tfjob["spec"]["tfReplicaSpecs"].values():
        spec_ = replica["template"]["spec"]
        container = spec_["containers"][0]
        assert not any(k.startswith(("NCCL_", "FI_")) for k in env_of(container))
        assert not any(k.startswith("rdma/") for k in container["resources"]["limits"])
        assert "securityContext" not in container and "hostNetwork" not in spec_
        assert replica["restartPolicy"] == "OnFailure"


def test_infiniband_allreduce_plan_is_an_mpijob_restarting_whole(allreduce_rdma_plan):
    assert allreduce_rdma_plan.collectives["inter_node_link_kinds"] == ["infiniband"]
    mpijob = build_manifests(allreduce_rdma_plan, "mpijob", EmitOptions(backoff_limit=5, running_timeout=3600))[-1]
    assert mpijob["kind"] == "MPIJob"
    assert mpijob["spec"]["runPolicy"]["backoffLimit"] == 5
    assert mpijob["spec"]["runPolicy"]["activeDeadlineSeconds"] == 3600
    worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert env_of(worker)["NCCL_IB_DISABLE"] == "0"


@pytest.mark.parametrize("network, expected", [("host", "hostNetwork"), ("attachment:ib-net", "annotation")])
def test_network_applies_to_rdma_pods_only(allreduce_rdma_plan, network, expected):
    objects = build_manifests(allreduce_rdma_plan, "mpijob", EmitOptions(network=network))
    replicas = objects[-1]["spec"]["mpiReplicaSpecs"]
    worker, launcher = replicas["Worker"]["template"], replicas["Launcher"]["template"]
    if expected == "hostNetwork":
        assert worker["spec"]["hostNetwork"] is True and worker["spec"]["dnsPolicy"] == "ClusterFirstWithHostNet"
    else:
        assert worker["metadata"]["annotations"]["k8s.v1.cni.cncf.io/networks"] == "ib-net"
    assert "hostNetwork" not in launcher["spec"] and "annotations" not in launcher["metadata"]


def test_gang_scheduling_names_the_operators_podgroup_with_queue_and_priority(allreduce_rdma_plan):
    options = EmitOptions(gang="volcano", queue="research", priority="high-prio")
    objects = build_manifests(allreduce_rdma_plan, "tfjob", options)
    job = objects[-1]
    assert [o["kind"] for o in objects] == ["ConfigMap", "TFJob"]
    policy = job["spec"]["runPolicy"]["schedulingPolicy"]
    assert {k: policy[k] for k in ("minAvailable", "queue", "priorityClass")} == {
        "minAvailable": 2, "queue": "research", "priorityClass": "high-prio"}
    assert policy["minResources"]["nvidia.com/gpu"] == "16"
    pod = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    assert pod["spec"]["priorityClassName"] == "high-prio" and pod["spec"]["schedulerName"] == "volcano"
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "mlp" == job["metadata"]["name"]
    coscheduled = build_manifests(allreduce_rdma_plan, "tfjob", EmitOptions(gang="coscheduling", priority="high-prio"))
    pod = coscheduled[-1]["spec"]["tfReplicaSpecs"]["Worker"]["template"]
    assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "mlp"


def test_arena_options_reach_every_pod(ps_plan):
    options = EmitOptions(
        script="train.py", data=("imagenet:/data",), image_pull_secrets=("regcred",), env=("EPOCHS=3",),
        selector=("pool=gpu",), tolerations=("nvidia.com/gpu:NoSchedule", "dedicated=ml"), priority="batch",
        log_dir="/data/logs", code_from="pvc:code-claim:/projects/mnist",
    )
    tfjob = build_manifests(ps_plan, "tfjob", options)[-1]
    for replica in tfjob["spec"]["tfReplicaSpecs"].values():
        spec = replica["template"]["spec"]
        container = spec["containers"][0]
        assert container["command"][4] == "/workspace/train.py"
        assert env_of(container)["EPOCHS"] == "3" and env_of(container)["AUTODIST_LOG_DIR"] == "/data/logs"
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert mounts["data-0"]["mountPath"] == "/data"
        assert mounts["code"] == {"name": "code", "mountPath": "/workspace", "readOnly": True, "subPath": "projects/mnist"}
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["code"]["persistentVolumeClaim"] == {"claimName": "code-claim", "readOnly": True}
        assert volumes["data-0"]["persistentVolumeClaim"] == {"claimName": "imagenet"}
        assert spec["imagePullSecrets"] == [{"name": "regcred"}]
        assert spec["nodeSelector"] == {"pool": "gpu"}
        assert spec["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "ml"},
        ]
        assert spec["priorityClassName"] == "batch"


def test_code_from_configmap_carries_the_script_folder(ps_plan):
    options = EmitOptions(script="train.py", code_from="configmap", code_files=(("train.py", "print(1)\n"),))
    objects = build_manifests(ps_plan, "tfjob", options)
    code = next(o for o in objects if o["metadata"]["name"] == "embedding-code")
    assert code["data"] == {"train.py": "print(1)\n"}
    pod = objects[-1]["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]
    assert {"name": "code", "configMap": {"name": "embedding-code"}} in pod["volumes"]


@pytest.mark.parametrize(
    "options, message",
    [
        (EmitOptions(code_from="pvc:claim"), "--code-from: 'pvc:claim' is not image, configmap or pvc:CLAIM:PATH"),
        (EmitOptions(code_from="pvc:claim:"), "with a path"),
        (EmitOptions(tolerations=("gpu:Sometimes",),), "--toleration: 'gpu:Sometimes': effect 'Sometimes'"),
        (EmitOptions(env=("NOVALUE",),), "--env: 'NOVALUE' is not NAME=VALUE"),
        (EmitOptions(env=("1X=2",),), "--env: '1X' is not an environment variable name"),
        (EmitOptions(priority="High_Prio"), "--priority: 'High_Prio' is not a DNS-1123 label"),
        (EmitOptions(shm_size="16GB"), "--shm-size: '16GB' is not a Kubernetes quantity"),
        (EmitOptions(shm_size="4Ti"), "--shm-size: 4Ti is more than the pod's memory limit"),
        (EmitOptions(network="bridge"), "--network: 'bridge' is not host or attachment:NAME"),
        (EmitOptions(data=("claim-only",),), "--data: 'claim-only' is not CLAIM:/MOUNT/PATH"),
        (EmitOptions(gang="coscheduling", queue="q"), "--queue: the coscheduling PodGroup has no queue"),
        (EmitOptions(log_dir="logs"), "--logdir: 'logs' is not an absolute path"),
    ],
)
def test_bad_manifest_options_are_one_clear_error(allreduce_rdma_plan, options, message):
    with pytest.raises(InputError, match=re.escape(message)):
        build_manifests(allreduce_rdma_plan, "tfjob", options)


def test_mpijob_refuses_a_plan_that_splits_replicas(mlp_graph):
    from autodist.plan import Plan
    from placement import simulate
    from tests.test_plan_fixtures import allreduce_strategy, cluster, cost_model

    spec = cluster("dgx-h100:2")
    strategy = allreduce_strategy(mlp_graph, spec)
    strategy.replicas = [strategy.replicas[2 * i] + strategy.replicas[2 * i + 1] for i in range(len(strategy.replicas) // 2)]
    plan = Plan.from_strategy(mlp_graph, spec, strategy, simulate(mlp_graph, spec, strategy, cost_model()),
                              cost_model().id, 0)
    with pytest.raises(LaunchError, match="splits a replica over several devices"):
        build_manifests(plan, "mpijob")


def test_validator_still_rejects_what_the_operators_would(allreduce_rdma_plan):
    objects = build_manifests(allreduce_rdma_plan, "tfjob")
    broken = copy.deepcopy(objects)
    broken[-1]["spec"]["runPolicy"]["backoffLimit"] = "three"
    with pytest.raises(LaunchError, match="backoffLimit"):
        validate_objects(broken)
    broken = copy.deepcopy(objects)
    broken[-1]["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["volumes"][-1]["emptyDir"]["sizeLimit"] = []
    with pytest.raises(LaunchError, match="sizeLimit"):
        validate_objects(broken)
    assert json.loads(read_plan_json(objects[:1])) == allreduce_rdma_plan.to_dict()


def test_dockerfile_builds_the_worker_image():
    """docker cannot run here: the Dockerfile is parsed and its instructions checked."""
    import os

    from launcher.options import CODE_DIR

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    text = open(os.path.join(root, "Dockerfile"), encoding="utf-8").read()
    logical = re.sub(r"\\\n", " ", text)
    instructions = [line.strip().split(None, 1) for line in logical.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    by_name = {}
    for name, rest in instructions:
        by_name.setdefault(name.upper(), []).append(rest)
    (base,) = by_name["FROM"]
    assert re.fullmatch(r"tensorflow/tensorflow:2\.21\.0-gpu", base)  # CUDA TensorFlow
    assert any(re.search(r"pip install .*\"?/src\[gpu\]\"?", run) for run in by_name["RUN"])
    assert any("openmpi-bin" in run and "openssh-server" in run for run in by_name["RUN"])
    # ssh as mpi-operator's own images set it: new host keys trusted, no known_hosts in the
    # read-only ~/.ssh Secret mount, sshd accepting that mount's permissions
    ssh = " ".join(run for run in by_name["RUN"] if "ssh" in run)
    for setting in ("StrictHostKeyChecking no", "UserKnownHostsFile /dev/null", "StrictModes no"):
        assert setting in ssh
    assert json.loads(by_name["ENTRYPOINT"][-1]) == ["autodist", "worker"]
    assert by_name["WORKDIR"][-1] == CODE_DIR
    for package in ("autodist", "cost_models", "placement", "launcher"):
        assert f"COPY {package} /src/{package}" in text
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    assert "docker build -t REGISTRY/autodist:0.1.0 ." in readme


def test_worker_exits_retryable_when_a_peer_is_lost():
    """The code a collective TFJob's ExitCode policy restarts on: the operator retries 128 and above."""
    import tensorflow as tf

    from autodist.cli.worker_cmd import RETRYABLE_EXIT_CODE, lost_peer

    assert 128 <= RETRYABLE_EXIT_CODE <= 255
    assert lost_peer(tf.errors.UnavailableError(None, None, "Socket closed"))
    assert lost_peer(tf.errors.AbortedError(None, None, "Collective ops is aborted"))
    assert not lost_peer(tf.errors.InvalidArgumentError(None, None, "shape mismatch"))
    assert not lost_peer(ValueError("a bug in the script"))
