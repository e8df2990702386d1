"""``autodist costmodel collective``: a virtual nccl-tests (time, algbw, busbw of one collective)."""

import json
import subprocess
import sys

import pytest

from autodist.resource_spec import load_cluster
from cost_models.comm import LINK_EFFICIENCY, NVLS_EFFICIENCY


def _autodist(*args):
    return subprocess.run([sys.executable, "-m", "autodist", *args], capture_output=True, text=True, timeout=300)


def _collective(*args):
    out = _autodist("costmodel", "collective", *args, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_one_node_reproduces_the_reference_formulas():
    """hardware.md, "Cost formulas in common use" and "Collective measurements": allreduce
    t = 2(n-1)/n S/B + 2(n-1) a, reduce-scatter / all-gather t = (n-1)/n S/B + (n-1) a,
    busbw = algbw 2(n-1)/n; B is NVLink's per-direction rate at its achieved efficiency (A100: no NVLS)."""
    fabric = load_cluster(preset="dgx-a100").nodes[0].fabric
    B, a, n, S = fabric.bandwidth * LINK_EFFICIENCY["nvlink"], fabric.latency, 8, 2**30
    allreduce = _collective("--preset", "dgx-a100", "--op", "allreduce", "--bytes", str(S))
    assert allreduce["time"] == pytest.approx(2 * (n - 1) / n * S / B + 2 * (n - 1) * a)
    assert allreduce["algbw"] == pytest.approx(S / allreduce["time"])
    assert allreduce["busbw"] == pytest.approx(allreduce["algbw"] * 2 * (n - 1) / n)
    assert len(allreduce["devices"]) == n
    for op in ("allgather", "reducescatter"):
        half = _collective("--preset", "dgx-a100", "--op", op, "--bytes", str(S))
        assert half["time"] == pytest.approx((n - 1) / n * S / B + (n - 1) * a)
        assert half["busbw"] == pytest.approx(S / half["time"] * (n - 1) / n)
    two = ["node-0/GPU:0", "node-0/GPU:5"]
    bcast = _collective("--preset", "dgx-a100", "--op", "broadcast", "--bytes", str(S), "--devices", *two)
    assert bcast["devices"] == two and bcast["time"] == pytest.approx(S / B + a)
    assert bcast["busbw"] == pytest.approx(bcast["algbw"])


def test_hopper_nvswitch_allreduce_uses_nvlink_sharp():
    """NVLS on 8 H100: t = S / (B e) + 2a, busbw near the ~480 GB/s of rows C2 and C4 it was fitted on;
    on two GPUs the ring is faster and NCCL keeps it."""
    fabric = load_cluster(preset="dgx-h100").nodes[0].fabric
    S, n = 2**33, 8
    nvls = _collective("--preset", "dgx-h100", "--op", "allreduce", "--bytes", str(S))
    assert nvls["time"] == pytest.approx(S / (fabric.bandwidth * NVLS_EFFICIENCY) + 2 * fabric.latency)
    assert nvls["busbw"] == pytest.approx(478.87e9, rel=0.01)
    two = _collective("--preset", "dgx-h100", "--op", "allreduce", "--bytes", str(S),
                      "--devices", "node-0/GPU:0", "node-0/GPU:1")
    B = fabric.bandwidth * LINK_EFFICIENCY["nvlink"]
    assert two["time"] == pytest.approx(S / B + 2 * fabric.latency)


def test_text_output_names_the_figures():
    out = _autodist("costmodel", "collective", "--preset", "p4d.24xlarge:2", "--op", "allreduce", "--bytes", "65536")
    assert out.returncode == 0, out.stderr
    assert "over 16 devices" in out.stdout and "algbw" in out.stdout and "busbw" in out.stdout


@pytest.mark.parametrize("args, named", [
    (["--bytes", "0"], "--bytes"),
    (["--bytes", "-4096"], "--bytes"),
    (["--bytes", "lots"], "--bytes"),
    (["--op", "alltoall"], "--op"),
    (["--devices", "node-0/GPU:0"], "--devices"),
    (["--devices", "node-0/GPU:0", "node-7/GPU:0"], "node-7/GPU:0"),
])
def test_bad_input_is_one_line_and_exit_2(args, named):
    base = {"--op": "allreduce", "--bytes": "1024"}
    given = dict(base)
    rest = []
    if args[0] in base:
        given[args[0]] = args[1]
    else:
        rest = args
    argv = ["costmodel", "collective", "--preset", "dgx-h100"]
    for key, value in given.items():
        argv += [key, value]
    out = _autodist(*argv, *rest)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], out.stderr
    assert out.stdout == ""


def test_shipped_efficiencies_are_the_fit_on_the_published_rows():
    from cost_models.fitting.collectives_published import fit
    from cost_models.comm import NVLS_EFFICIENCY

    fitted = fit()
    assert sorted(fitted) == ["infiniband", "nvlink", "nvlink-bridge", "nvls", "pcie-cpu", "roce"]
    shipped = {**LINK_EFFICIENCY, "nvls": NVLS_EFFICIENCY}
    for kind, value in fitted.items():
        assert shipped[kind] == pytest.approx(value, abs=5e-4), kind


def test_collectives_published_is_scored_leave_one_system_out():
    from cost_models.fitting.collectives_published import ROWS, evaluate, report_lines

    report = evaluate()
    assert [r["row"] for r in report["rows"]] == [r.row for r in ROWS]
    by_row = {r["row"]: r for r in report["rows"]}
    # NVLS, EFA, NVLink bridges and PCIe through the CPU each have one system only: predicted with the shipped
    # value, not scored.
    assert not by_row["C2"]["fitted_on_other_systems"] and not by_row["C14 (3 nodes)"]["fitted_on_other_systems"]
    assert not by_row["C13 (3 GPUs)"]["fitted_on_other_systems"]
    assert not by_row["C13 (2 GPUs)"]["fitted_on_other_systems"]
    assert by_row["C9"]["fitted_on_other_systems"]
    assert report["rows_scored"] == sum(r["fitted_on_other_systems"] for r in report["rows"])
    assert 0 <= report["median_error"] <= report["max_error"]
    assert all(r["predicted_busbw"] > 0 for r in report["rows"])
    lines = report_lines(report)
    assert len(lines) == len(ROWS) + 2
    assert lines[-1].startswith(f"  {report['rows_scored']} scored rows: median error")


def test_pcie_topologies_are_priced_apart(tmp_path):
    """g4dn.12xlarge's T4s reach each other through the CPU (fitted on row C13); the same GPUs behind a PCIe
    switch go peer to peer (hardware.md's measured Gen3 rate); NVLink between them is faster still."""
    from autodist.resource_spec import load_cluster as load
    from autodist.resource_spec.cluster_file import dump_cluster

    S, n = 2**30, 4
    spec = load(preset="g4dn.12xlarge")
    fabric = spec.nodes[0].fabric
    assert fabric.kind == "pcie" and fabric.via_cpu
    via_cpu = _collective("--preset", "g4dn.12xlarge", "--op", "allreduce", "--bytes", str(S))
    B, a = fabric.bandwidth * LINK_EFFICIENCY["pcie-cpu"], fabric.latency
    assert via_cpu["time"] == pytest.approx(2 * (n - 1) / n * S / B + 2 * (n - 1) * a)
    switch = tmp_path / "switch.yaml"
    switch.write_text("nodes:\n  - {name: box, gpus: {model: T4, count: 4}, fabric: {kind: pcie, generation: 3}}\n")
    peer = _collective("--cluster", str(switch), "--op", "allreduce", "--bytes", str(S))
    assert peer["busbw"] / via_cpu["busbw"] == pytest.approx(LINK_EFFICIENCY["pcie"] / LINK_EFFICIENCY["pcie-cpu"],
                                                             rel=1e-4)
    bridged = tmp_path / "nvlink.yaml"
    bridged.write_text("nodes:\n  - {name: box, gpus: {model: T4, count: 4}, fabric: nvlink-v100}\n")
    assert _collective("--cluster", str(bridged), "--op", "allreduce", "--bytes", str(S))["busbw"] > peer["busbw"]
    # A cluster file says it, and writes it back; documents of other fabrics stay as they were.
    assert "via_cpu: true" in dump_cluster(spec)
    assert "pcie via CPU" in _autodist("cluster", "show", "--preset", "g4dn.12xlarge").stdout
    assert "via_cpu" not in json.dumps(load(preset="dgx-h100").to_dict())
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("nodes:\n  - {name: box, gpus: {model: T4, count: 4}, fabric: {kind: nvlink, speed: 100 Gb/s, "
                     "via_cpu: true}}\n")
    out = _autodist("costmodel", "collective", "--cluster", str(wrong), "--op", "allreduce", "--bytes", "1024")
    assert out.returncode == 2 and "via_cpu" in out.stderr and out.stderr.strip().count("\n") == 0


def test_nvlink_bridges_join_gpus_in_pairs(tmp_path):
    """Four A100s in NVLink-bridged pairs, the pairs joined through the CPU (row C13's box): an allreduce inside a
    pair runs at the bridge's rate, one across pairs and the ring of all four at PCIe's through the CPU."""
    from autodist.resource_spec import load_cluster as load
    from autodist.resource_spec.cluster_file import dump_cluster, parse_cluster

    box = tmp_path / "bridged.yaml"
    box.write_text("nodes:\n  - {name: box, gpus: {model: A100-80GB, count: 4}, fabric: pcie-gen4-cpu, "
                   "bridge: nvlink-a100}\n")
    spec = load(str(box))
    S = str(2**30)

    def busbw(*devices):
        return _collective("--cluster", str(box), "--op", "allreduce", "--bytes", S, "--devices", *devices)["busbw"]

    bridge, fabric = spec.nodes[0].bridge, spec.nodes[0].fabric
    assert busbw("box/GPU:0", "box/GPU:1") == pytest.approx(bridge.bandwidth * LINK_EFFICIENCY["nvlink-bridge"],
                                                            rel=1e-3)
    across = busbw("box/GPU:1", "box/GPU:2")
    assert across == pytest.approx(fabric.bandwidth * LINK_EFFICIENCY["pcie-cpu"], rel=1e-3)
    assert busbw("box/GPU:0", "box/GPU:1", "box/GPU:2", "box/GPU:3") == pytest.approx(across, rel=1e-3)
    # Written back and read again; a node without bridges keeps its document.
    assert parse_cluster(dump_cluster(spec)).content_hash() == spec.content_hash()
    assert "bridge" not in json.dumps(load(preset="g4dn.12xlarge").to_dict())
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("nodes:\n  - {name: box, gpus: {model: T4, count: 4}, bridge: pcie-gen3}\n")
    out = _autodist("costmodel", "collective", "--cluster", str(wrong), "--op", "allreduce", "--bytes", "1024")
    assert out.returncode == 2 and "bridge" in out.stderr and out.stderr.strip().count("\n") == 0
