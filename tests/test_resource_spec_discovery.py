"""Discovery from Kubernetes Node objects.

No Kubernetes API server runs here: the pure conversion is fed Node objects
shaped as ``kubectl get nodes -o json`` returns them (``items`` of a NodeList);
the official client is run against no server at all and against a small
stand-in HTTP server that answers only the node list (the outer boundary).
"""

import copy
import warnings

import pytest

from autodist.cli import main
from autodist.cli.cluster_cmd import format_cluster
from autodist.errors import InputError
from autodist.resource_spec import load_cluster
from autodist.resource_spec.cluster_file import dump_cluster, parse_cluster
from autodist.resource_spec.discovery import DiscoveryWarning, nodes_to_spec


def k8s_node(name, ip, allocatable, labels, ready="True", unschedulable=False):
    """A Node as the API returns it in JSON (trimmed of fields discovery ignores)."""
    capacity = dict(allocatable, memory="2113638484Ki" if "memory" in allocatable else "0")
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"7c1e0f9a-{name}",
            "resourceVersion": "918273",
            "creationTimestamp": "2026-10-02T08:14:55Z",
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                **labels,
            },
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": "10.244.1.0/24", "providerID": f"baremetal://{name}"},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "allocatable": allocatable,
            "capacity": capacity,
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "Ready", "status": ready, "reason": "KubeletReady"},
            ],
            "nodeInfo": {"kubeletVersion": "v1.31.4", "containerRuntimeVersion": "containerd://1.7.22"},
        },
    }
    if unschedulable:
        node["spec"]["unschedulable"] = True
        node["spec"]["taints"] = [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]
    return node


H100_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/cuda.driver.major": "550",
    "feature.node.kubernetes.io/rdma.capable": "true",
    "feature.node.kubernetes.io/pci-15b3.present": "true",
    "autodist.io/nic-kind": "infiniband",
    "autodist.io/nic-speed": "400Gb/s",
    "autodist.io/nic-count": "8",
    "autodist.io/gpudirect": "true",
}
H100_ALLOCATABLE = {
    "cpu": "223",
    "ephemeral-storage": "1735837011659",
    "hugepages-1Gi": "0",
    "memory": "2113536084Ki",
    "nvidia.com/gpu": "8",
    "pods": "110",
    "rdma/rdma_shared_device_a": "1k",
}


def h100_node_list():
    """Two DGX H100 nodes, listed out of name order as an API server may."""
    return [k8s_node(f"dgx-{i}", f"10.1.0.{i + 10}", H100_ALLOCATABLE, H100_LABELS) for i in (1, 0)]


@pytest.fixture
def h100_nodes():
    return h100_node_list()


def test_h100_nodes_become_an_rdma_cluster(h100_nodes):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DiscoveryWarning)
        spec = nodes_to_spec(h100_nodes)
    assert [n.name for n in spec.nodes] == ["dgx-0", "dgx-1"]  # sorted, deterministic
    node = spec.nodes[0]
    assert node.address == "10.1.0.10"
    gpus = node.gpus()
    assert [g.name for g in gpus] == [f"dgx-0/GPU:{i}" for i in range(8)]
    assert {g.model for g in gpus} == {"H100-SXM"}
    assert gpus[0].memory_bytes == 81559 * 2**20 and gpus[0].peak_flops["bfloat16"] == 989e12
    assert node.devices[0].memory_bytes == 2113536084 * 1024
    assert len(node.nics) == 8 and node.gpus_per_nic() == 1
    assert {(n.kind, n.bandwidth, n.rdma, n.gpudirect) for n in node.nics} == {("infiniband", 50e9, True, True)}
    assert node.fabric.kind == "nvlink" and node.fabric.bandwidth == 450e9
    path = spec.path("dgx-0/GPU:3", "dgx-1/GPU:3")
    assert path.rdma and path.bandwidth == 50e9 and path.links == ("dgx-0/nic3/tx", "dgx-1/nic3/rx")
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert "kubernetes.io/arch" not in node.labels


def test_mixed_cluster_with_unknown_product_and_guesses():
    nodes = [
        k8s_node(
            "t4-a", "10.2.0.1",
            {"cpu": "47", "memory": "195000000Ki", "nvidia.com/gpu": "4", "pods": "110"},
            {"nvidia.com/gpu.product": "Tesla-T4-SHARED", "nvidia.com/gpu.memory": "15360",
             "autodist.io/nic-speed": "50"},
        ),
        k8s_node(
            "l4-a", "10.2.0.2",
            {"cpu": "31500m", "memory": "128Gi", "nvidia.com/gpu": "2", "pods": "110"},
            {"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.memory": "23034",
             "feature.node.kubernetes.io/rdma.available": "true", "autodist.io/nic-speed": "100G"},
        ),
        k8s_node("cpu-a", "10.2.0.3", {"cpu": "16", "memory": "64Gi", "pods": "110"}, {}),
        k8s_node("cordoned", "10.2.0.4", {"cpu": "16", "memory": "64Gi"}, {}, unschedulable=True),
        k8s_node("notready", "10.2.0.5", {"cpu": "16", "memory": "64Gi"}, {}, ready="False"),
    ]
    with pytest.warns(DiscoveryWarning) as record:
        spec = nodes_to_spec(nodes)
    messages = [str(w.message) for w in record]
    assert any("unknown GPU product 'NVIDIA-L4'" in m and "23034 MiB" in m for m in messages)
    assert any(m.startswith("node cpu-a: no autodist.io/nic-speed label") for m in messages)
    assert any("cordoned" in m for m in messages) and any("notready" in m for m in messages)
    assert [n.name for n in spec.nodes] == ["cpu-a", "l4-a", "t4-a"]

    t4 = spec.node("t4-a")
    assert [g.model for g in t4.gpus()] == ["T4"] * 4 and t4.fabric.kind == "pcie"
    assert t4.nics[0].bandwidth == 6.25e9 and not t4.nics[0].rdma
    l4 = spec.node("l4-a")
    assert [g.peak_flops for g in l4.gpus()] == [{}, {}]  # FLOP/s unknown, said so in the warning
    assert l4.gpus()[0].memory_bytes == 23034 * 2**20
    assert l4.nics[0].kind == "roce" and l4.nics[0].rdma and not l4.nics[0].gpudirect
    cpu = spec.node("cpu-a")
    assert cpu.gpus() == [] and cpu.nics[0].bandwidth == 1.25e9
    assert spec.compute_devices() == spec.gpus()
    # unknown figures survive the file round trip
    assert parse_cluster(dump_cluster(spec)) == spec


def test_cloud_node_names_fit_the_cli_width():
    nodes = [k8s_node(f"ip-10-0-12-{i}.ec2.internal", f"10.0.12.{i}", H100_ALLOCATABLE, H100_LABELS)
             for i in (34, 135)]
    text = format_cluster(nodes_to_spec(nodes))
    assert "ip-10-0-12-135.ec2.internal  nic0-7  infiniband  8" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_gpu_count_from_feature_label_when_not_allocatable():
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8",
              "autodist.io/nic-speed": "200Gb/s", "autodist.io/nic-kind": "infiniband"}
    node = k8s_node("a100", "10.3.0.1", {"cpu": "255", "memory": "1Ti"}, labels)
    spec = nodes_to_spec([node])
    assert [g.model for g in spec.gpus()] == ["A100-80GB"] * 8
    assert spec.nodes[0].nics[0].bandwidth == 25e9 and not spec.nodes[0].nics[0].rdma


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda n: n["metadata"]["labels"].update({"autodist.io/nic-speed": "fast"}), "autodist.io/nic-speed"),
        (lambda n: n["metadata"]["labels"].update({"autodist.io/nic-kind": "token-ring"}), "autodist.io/nic-kind"),
        (lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "eight"}), "nvidia.com/gpu"),
        (lambda n: n["metadata"].pop("name"), "metadata.name"),
    ],
)
def test_malformed_node_objects_name_the_field(h100_nodes, change, message):
    broken = copy.deepcopy(h100_nodes[0])
    change(broken)
    with pytest.raises(InputError, match=message.replace(".", r"\.")):
        nodes_to_spec([broken])


def test_nothing_schedulable_is_an_error():
    node = k8s_node("down", "10.4.0.1", {"cpu": "8", "memory": "8Gi"}, {}, ready="Unknown")
    with pytest.warns(DiscoveryWarning), pytest.raises(InputError, match="no schedulable Ready nodes"):
        nodes_to_spec([node])


def _run(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    return exit_info.value.code, capsys.readouterr()


def test_no_kubernetes_configuration_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent-kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code, (out, err) = _run(["cluster", "show", "--from-kubernetes"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "no Kubernetes configuration" in err


def test_unreachable_api_server_is_one_line(tmp_path, capsys):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: dead\n"
        "clusters: [{name: dead, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: not-a-secret}}]\n"
        "contexts: [{name: dead, context: {cluster: dead, user: u}}]\n"
    )
    code, (out, err) = _run(
        ["cluster", "show", "--from-kubernetes", "--kubeconfig", str(kubeconfig), "--selector", "gpu=h100"], capsys
    )
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{kubeconfig}: cannot reach the Kubernetes API server" in err


def test_load_cluster_rejects_missing_kubeconfig(tmp_path):
    with pytest.raises(InputError, match="cannot load kubeconfig"):
        load_cluster(from_kubernetes=True, kubeconfig=str(tmp_path / "nope"))


@pytest.fixture
def fake_api_server(h100_nodes):
    """A stand-in Kubernetes API server (no real one runs here) that answers GET /api/v1/nodes.

    It serves a NodeList of real-shaped Node objects and records each request's path
    and query, so the test sees what the official client sent.
    """
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    requests = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            requests.append(self.path)
            body = json.dumps({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                               "items": h100_nodes}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", requests
    server.shutdown()
    server.server_close()
    thread.join()


def test_from_kubernetes_through_the_official_client(fake_api_server, tmp_path, capsys):
    url, requests = fake_api_server
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: lab\n"
        f"clusters: [{{name: lab, cluster: {{server: '{url}'}}}}]\n"
        "users: [{name: u, user: {token: not-a-secret}}]\n"
        "contexts: [{name: lab, context: {cluster: lab, user: u}}]\n"
    )
    spec = load_cluster(from_kubernetes=True, kubeconfig=str(kubeconfig), label_selector="gpu=h100")
    assert spec == nodes_to_spec(h100_node_list())
    assert requests == ["/api/v1/nodes?labelSelector=gpu%3Dh100"]
    code, (out, err) = _run(["cluster", "show", "--from-kubernetes", "--kubeconfig", str(kubeconfig)], capsys)
    assert code == 0 and err == "" and "dgx-1  nic0-7  infiniband  8" in out
