"""ResourceSpec from presets and cluster files: shapes, paths, file == preset."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autodist.cli import main
from autodist.errors import InputError
from autodist.resource_spec import ResourceSpec, load_cluster
from autodist.resource_spec.cluster_file import cluster_to_dict, dump_cluster, parse_cluster
from autodist.resource_spec.presets import MACHINES

GPUS_PER_MACHINE = {"dgx-h100": 8, "dgx-a100": 8, "p4d.24xlarge": 8, "g4dn.12xlarge": 4, "p3.16xlarge": 8,
                    "cpu-2s-25g": 0, "cpu-local": 0}


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def test_every_machine_has_an_expectation():
    assert set(GPUS_PER_MACHINE) == set(MACHINES)


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_every_preset_loads_and_prints(name, capsys):
    spec = load_cluster(preset=f"{name}:3")
    prefix = MACHINES[name].node_prefix
    assert [n.name for n in spec.nodes] == [f"{prefix}-0", f"{prefix}-1", f"{prefix}-2"]
    assert len(spec.gpus()) == 3 * GPUS_PER_MACHINE[name]
    assert len(spec.devices("CPU")) == 3
    for device in spec.devices():
        assert device.name == f"{device.node}/{device.kind}:{device.index}"
        assert device.memory_bytes > 0 and device.memory_bandwidth > 0
        assert device.peak_flops["float32"] > 0
    assert all(node.nics for node in spec.nodes)
    assert ResourceSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec

    code, out, err = run_cli(["cluster", "show", "--preset", f"{name}:3"], capsys)
    assert code == 0 and err == ""
    assert f"{prefix}-2" in out and "totals" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    code, out, _ = run_cli(["cluster", "show", "--preset", name, "--json"], capsys)
    assert code == 0 and ResourceSpec.from_dict(json.loads(out)) == load_cluster(preset=name)


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_file_with_preset_group_equals_preset(name, tmp_path):
    prefix = MACHINES[name].node_prefix
    path = tmp_path / "cluster.yaml"
    path.write_text(f"nodes:\n  - {{name: {prefix}, count: 2, preset: {name}}}\n")
    assert load_cluster(path=str(path)) == load_cluster(preset=f"{name}:2")


def test_explicit_file_equals_dgx_h100_preset(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent("""\
        name: two dgx
        nodes:
          - name: node
            count: 2
            cpus: {model: xeon-8480c-2s}
            gpus: {model: H100-SXM, count: 8}
            fabric: {kind: nvswitch, bandwidth: 450 GB/s, latency: 1 us}
            host_link: {kind: pcie, generation: 5}
            nics:
              - {kind: infiniband, speed: 400 Gb/s, latency: 0.75 us, rdma: true, gpudirect: true, count: 8}
        """))
    spec = load_cluster(path=str(path))
    assert spec.name == "two dgx"
    assert spec == load_cluster(preset="dgx-h100:2")


def test_dump_of_every_preset_reads_back_equal_and_grouped():
    for name in MACHINES:
        spec = load_cluster(preset=f"{name}:3")
        document = cluster_to_dict(spec)
        assert [(n["name"], n["count"]) for n in document["nodes"]] == [(MACHINES[name].node_prefix, 3)]
        assert parse_cluster(dump_cluster(spec)) == spec


def test_paths_on_dgx_h100():
    spec = load_cluster(preset="dgx-h100:2")
    same = spec.path("node-0/GPU:1", "node-0/GPU:1")
    assert same.kind == "same-device" and same.links == ()
    intra = spec.path("node-0/GPU:0", "node-0/GPU:7")
    assert intra.kind == "intra-node" and intra.bandwidth == 450e9 and not intra.rdma
    assert intra.medium == "nvlink"
    host = spec.path("node-0/CPU:0", "node-0/GPU:7")
    assert host.bandwidth == 63e9 and host.medium == "pcie"  # CPU <-> GPU over PCIe Gen5, not NVLink
    inter = spec.path("node-0/GPU:2", "node-1/GPU:5")
    assert inter.kind == "inter-node" and inter.rdma
    assert inter.links == ("node-0/nic2/tx", "node-1/nic5/rx")  # full duplex: sends on one direction, receives on the other
    assert intra.links == ("node-0/GPU:0/fabric/tx", "node-0/GPU:7/fabric/rx")
    assert inter.bandwidth == 50e9 and inter.latency == pytest.approx(1.5e-6)
    assert spec.nodes[0].gpus_per_nic() == 1


def test_nic_sharing_on_p4d_and_g4dn():
    p4d = load_cluster(preset="p4d.24xlarge").nodes[0]
    assert [p4d.nic_for(g) for g in p4d.gpus()] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert p4d.gpus_per_nic() == 2
    assert [d.name for d in p4d.devices_on_nic(3)] == ["node-0/GPU:6", "node-0/GPU:7"]
    g4dn = load_cluster(preset="g4dn.12xlarge:2")
    assert g4dn.nodes[0].gpus_per_nic() == 4
    path = g4dn.path("node-0/GPU:0", "node-1/GPU:3")
    assert path.bandwidth == 6.25e9 and not path.rdma  # 50 GbE TCP


def test_pcie_caps_a_nic_without_gpudirect(tmp_path):
    path = tmp_path / "pcie.yaml"
    path.write_text(textwrap.dedent("""\
        nodes:
          - name: box
            count: 2
            gpus: {model: T4, count: 2}
            fabric: {kind: pcie, generation: 3}
            nics: [{kind: roce, speed: 200 Gb/s}]
        """))
    spec = load_cluster(path=str(path))
    gpu_path = spec.path("box-0/GPU:0", "box-1/GPU:1")
    assert gpu_path.rdma and gpu_path.bandwidth == 15.75e9  # PCIe Gen3 below 25 GB/s RoCE
    assert gpu_path.medium == "pcie"
    assert spec.nodes[0].nics[0].latency == 1.5e-6  # the kind's default


def test_explicit_unknown_gpu_and_units(tmp_path):
    path = tmp_path / "custom.yaml"
    path.write_text(textwrap.dedent("""\
        nodes:
          - address: 10.0.0.5
            gpus:
              - {model: MyAccel, count: 2, peak_flops: {float32: 20, bfloat16: "0.4 PFLOP/s"},
                 memory: 96 GiB, memory_bandwidth: "3 TB/s"}
              - {model: T4, memory: 15 GB}
            fabric: pcie-gen4
        """))
    spec = load_cluster(path=str(path))
    assert spec.name == "custom" and spec.nodes[0].name == spec.nodes[0].address == "10.0.0.5"
    first, third = spec.device("10.0.0.5/GPU:0"), spec.device("10.0.0.5/GPU:2")
    assert first.peak_flops == {"float32": 20e12, "bfloat16": 0.4e15}
    assert first.memory_bytes == 96 * 2**30 and first.memory_bandwidth == 3e12
    assert third.model == "T4" and third.memory_bytes == 15 * 10**9 and third.peak_flops["float32"] == 8.1e12
    assert parse_cluster(dump_cluster(spec)) == spec


def test_preset_override_keeps_other_devices(tmp_path):
    path = tmp_path / "override.yaml"
    path.write_text("nodes: [{name: n, preset: dgx-a100, gpus: {model: A100-40GB, count: 4}, nics: [ib-ndr]}]\n")
    node = load_cluster(path=str(path)).nodes[0]
    assert [d.model for d in node.devices] == ["epyc-7742-2s"] + ["A100-40GB"] * 4
    assert len(node.nics) == 1 and node.nics[0].bandwidth == 50e9 and not node.nics[0].gpudirect


def test_resource_spec_json_file_is_accepted(tmp_path):
    spec = load_cluster(preset="p3.16xlarge:2")
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec.to_dict()))
    assert load_cluster(path=str(path)) == spec


def test_exactly_one_source():
    with pytest.raises(InputError, match="exactly one"):
        load_cluster()
    with pytest.raises(InputError, match="exactly one"):
        load_cluster(path="x.yaml", preset="dgx-h100")
    with pytest.raises(InputError, match="selector"):
        load_cluster(preset="dgx-h100", label_selector="a=b")


def test_cpu_local_needs_no_tensorflow():
    code = (
        "import sys, autodist\n"
        "spec = autodist.load_cluster(preset='cpu-local:2')\n"
        "assert [n.name for n in spec.nodes] == ['local-0', 'local-1']\n"
        "assert spec.path('local-0/CPU:0', 'local-1/CPU:0').links == ('local-0/nic0/tx', 'local-1/nic0/rx')\n"
        "assert 'tensorflow' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_local_machine_reports_this_host():
    import os

    from autodist.resource_spec.discovery import DiscoveryWarning

    with pytest.warns(DiscoveryWarning, match="memory bandwidth unknown"):
        spec = load_cluster(preset="local")
    cpu = spec.device("local/CPU:0")
    assert cpu.memory_bytes > 0 and spec.nodes[0].labels["cpus"] == str(os.cpu_count())
    assert cpu.peak_flops["float32"] > 0


CLUSTER_FILES = sorted((Path(__file__).resolve().parent.parent / "benchmarks" / "clusters").glob("*.yaml"))


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=[p.name for p in CLUSTER_FILES])
def test_example_cluster_files_load_and_dump_back(path, capsys):
    spec = load_cluster(path=str(path))
    assert spec.name == path.stem
    code, out, err = run_cli(["cluster", "show", str(path), "--yaml"], capsys)
    assert code == 0 and err == "" and parse_cluster(out) == spec


def test_example_files_match_what_they_say():
    clusters = Path(__file__).resolve().parent.parent / "benchmarks" / "clusters"
    assert load_cluster(path=str(clusters / "cpu-local-2.yaml")) == load_cluster(preset="cpu-local:2")
    lab = load_cluster(path=str(clusters / "lab-mixed.yaml"))
    assert [n.address for n in lab.nodes] == ["10.0.1.10", "10.0.1.11", "10.0.2.7", "10.0.3.2"]
    t4_to_dgx = lab.path("t4box/GPU:0", "dgx-1/GPU:4")
    assert t4_to_dgx.bandwidth == 12.5e9 and t4_to_dgx.rdma and t4_to_dgx.medium == "roce"


def test_discovery_warnings_are_one_line_each_in_the_cli(capsys):
    code, out, err = run_cli(["cluster", "show", "--preset", "local"], capsys)
    assert code == 0 and "CPU:0" in out and "totals" in out
    lines = err.splitlines()
    assert lines and all(line.startswith("autodist: warning: ") for line in lines)
    assert "local CPU: memory bandwidth unknown" in err
