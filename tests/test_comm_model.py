"""Communication model: point-to-point, ring / hierarchical / master allreduce, PS fan-in."""

import pytest

from autodist.errors import InputError
from autodist.graph.item import VariableInfo
from autodist.resource_spec import DeviceSpec, LinkSpec, NodeSpec, ResourceSpec, load_cluster
from cost_models import CostModel, Phase, gradient_bytes, link_busy
from cost_models.calibration import TransferCalibration, fit_line
from cost_models.comm import GRPC_BANDWIDTH, LINK_EFFICIENCY, TCP_EFFICIENCY, CommModel

NVLINK = LinkSpec("nvlink", 450e9, 1e-6)
IB = LinkSpec("infiniband", 50e9, 2e-6, rdma=True, gpudirect=True)


def _cluster(nodes, gpus, nics_per_node=1):
    out = []
    for k in range(nodes):
        name = f"n{k}"
        devices = [
            DeviceSpec(f"{name}/GPU:{i}", "GPU", "H100", {"float32": 67e12}, 80 * 2**30, 3.35e12, name, i)
            for i in range(gpus)
        ]
        out.append(NodeSpec(name, devices, NVLINK, [IB] * nics_per_node))
    return ResourceSpec(out, name="test")


def _gpus(spec):
    return [d.name for d in spec.gpus()]


def test_ring_allreduce_matches_the_formula():
    spec = _cluster(1, 8)
    comm = CommModel(spec)
    S, n = 256 * 2**20, 8
    B, a = NVLINK.bandwidth * LINK_EFFICIENCY["nvlink"], NVLINK.latency
    expected = 2 * (n - 1) / n * S / B + 2 * (n - 1) * a
    phases = comm.allreduce_phases(S, _gpus(spec), "ring")
    assert len(phases) == 2  # reduce-scatter, all-gather
    assert comm.allreduce_time(S, _gpus(spec), "ring") == pytest.approx(expected)
    assert set(phases[0].links) == {f"n0/GPU:{i}/fabric/{way}" for i in range(8) for way in ("tx", "rx")}
    assert all(isinstance(p, Phase) for p in phases)


def test_hierarchical_uses_nvlink_inside_and_the_nic_between():
    spec = _cluster(2, 8, nics_per_node=1)
    comm = CommModel(spec)
    S, G, N = 512 * 2**20, 8, 2
    scatter, inter, gather = comm.allreduce_phases(S, _gpus(spec), "hierarchical")
    assert all("/fabric/" in link for link in scatter.links + gather.links)
    assert set(inter.links) == {f"n{i}/nic0/{way}" for i in range(2) for way in ("tx", "rx")}
    B_intra = NVLINK.bandwidth * LINK_EFFICIENCY["nvlink"]
    B_nic_per_gpu = IB.bandwidth * LINK_EFFICIENCY["infiniband"] / G  # one NIC shared by 8 GPUs
    assert scatter.seconds == pytest.approx((G - 1) / G * S / B_intra + (G - 1) * NVLINK.latency)
    assert inter.seconds == pytest.approx(2 * (N - 1) / N * (S / G) / B_nic_per_gpu + 2 * (N - 1) * 2 * IB.latency)
    # A NIC per GPU gives every GPU the whole NIC: the inter-node phase is G times shorter.
    rich = CommModel(_cluster(2, 8, nics_per_node=8))
    inter_rich = rich.allreduce_phases(S, _gpus(rich.resource_spec), "hierarchical")[1]
    assert inter_rich.seconds == pytest.approx(
        2 * (N - 1) / N * (S / G) / (IB.bandwidth * LINK_EFFICIENCY["infiniband"]) + 2 * (N - 1) * 2 * IB.latency
    )
    assert len(inter_rich.links) == 32  # 8 NICs a node, both directions


def test_master_moves_the_whole_message_over_one_nic_per_node():
    spec = _cluster(2, 8, nics_per_node=8)
    comm = CommModel(spec)
    S = 512 * 2**20
    reduce, inter, bcast = comm.allreduce_phases(S, _gpus(spec), "master")
    assert set(inter.links) == {f"n{i}/nic0/{way}" for i in range(2) for way in ("tx", "rx")}
    assert inter.seconds >= S / (IB.bandwidth * LINK_EFFICIENCY["infiniband"])
    # With a NIC per GPU, hierarchical beats reduce-to-master.
    assert comm.allreduce_time(S, _gpus(spec), "hierarchical") < comm.allreduce_time(S, _gpus(spec), "master")


def test_single_node_collectives_reduce_to_the_ring_and_trivial_cases():
    spec = load_cluster(preset="dgx-h100")
    comm = CostModel.default().comm_model(spec)
    gpus = _gpus(spec)
    for algorithm in ("hierarchical", "master"):
        assert comm.allreduce_time(2**26, gpus, algorithm) == pytest.approx(comm.allreduce_time(2**26, gpus, "ring"))
    assert comm.allreduce_phases(2**20, gpus[:1]) == []
    assert comm.allreduce_time(2**28, gpus) > comm.allreduce_time(2**20, gpus)


def test_fused_bucket_pays_latency_once():
    spec = load_cluster(preset="dgx-h100:2")
    comm = CostModel.default().comm_model(spec)
    gpus = _gpus(spec)
    sizes = [4096] * 50
    separate = sum(comm.allreduce_time(s, gpus, "hierarchical") for s in sizes)
    fused = comm.allreduce_time(sum(sizes), gpus, "hierarchical")
    assert fused < separate / 10


def test_point_to_point_latency_overhead_bandwidth():
    spec = _cluster(2, 2)
    cal = TransferCalibration(overhead=100e-6, bandwidth=2e9)
    comm = CommModel(spec, cal)
    (phase,) = comm.transfer_phases("n0/GPU:0", "n1/GPU:1", 10**8)
    expected = 2 * IB.latency + 100e-6 + 10**8 / (IB.bandwidth * LINK_EFFICIENCY["infiniband"])
    assert phase.seconds == pytest.approx(expected)
    assert phase.links == ("n0/nic0/tx", "n1/nic0/rx")
    assert comm.transfer_phases("n0/GPU:0", "n0/GPU:0", 10**8) == []
    with pytest.raises(InputError, match="nbytes"):
        comm.transfer_phases("n0/GPU:0", "n1/GPU:0", -1)
    with pytest.raises(InputError, match="algorithm"):
        comm.allreduce_phases(10, _gpus(spec), "tree")


def test_ps_traffic_between_nodes_is_grpc_not_rdma():
    """TensorFlow moves PS pushes and pulls over gRPC (TCP), even on an InfiniBand NIC."""
    spec = _cluster(2, 2)
    comm = CommModel(spec, TransferCalibration(overhead=100e-6, bandwidth=2e9))
    nbytes = 10**8
    (push,) = comm.ps_phases("n0/GPU:0", "n1/GPU:1", nbytes)
    grpc_bandwidth = min(IB.bandwidth * TCP_EFFICIENCY, GRPC_BANDWIDTH)
    assert grpc_bandwidth == GRPC_BANDWIDTH  # 50 GB/s NDR at TCP efficiency is above gRPC's own ceiling
    assert push.seconds == pytest.approx(2 * IB.latency + 100e-6 + nbytes / grpc_bandwidth)
    (rdma,) = comm.transfer_phases("n0/GPU:0", "n1/GPU:1", nbytes)
    assert push.seconds > 5 * rdma.seconds
    # On 25 Gb/s Ethernet the NIC at TCP efficiency is the limit.
    slow = CommModel(load_cluster(preset="cpu-2s-25g:2"))
    a, b = (node.devices[0].name for node in slow.resource_spec.nodes)
    nic = slow.resource_spec.nodes[0].nics[0]
    assert slow.ps_phases(a, b, nbytes)[0].seconds == pytest.approx(
        2 * nic.latency + nbytes / (nic.bandwidth * TCP_EFFICIENCY))


def test_hybrid_allreduce_is_priced_as_the_runtime_sums_it():
    """The one-client runtime's ring is 2(n-1) steps of S/n tensors, gRPC across nodes, device copies inside."""
    spec = _cluster(2, 2)
    overhead = 100e-6
    comm = CommModel(spec, TransferCalibration(overhead=overhead, bandwidth=2e9))
    S, n = 2**28, 4
    gpus = _gpus(spec)
    across = 2 * IB.latency + overhead + S / n / GRPC_BANDWIDTH  # n0/GPU:1 -> n1/GPU:0 and back: the slowest hops
    ring = comm.graph_allreduce_phases(S, gpus, "ring")
    assert [p.seconds for p in ring] == pytest.approx([(n - 1) * across] * 2)
    assert sum(p.seconds for p in ring) > 3 * comm.allreduce_time(S, gpus, "ring")  # NCCL over RDMA
    # master: three tensors into GPU 0 (one across nodes at gRPC speed), then out again
    reduce, bcast = comm.graph_allreduce_phases(S, gpus, "master")
    inside = NVLINK.latency + overhead + S / (NVLINK.bandwidth * LINK_EFFICIENCY["nvlink"])
    assert reduce.seconds == pytest.approx(inside + 2 * (2 * IB.latency + overhead + S / GRPC_BANDWIDTH) - 2 * overhead)
    assert bcast.seconds == pytest.approx(reduce.seconds)
    # hierarchical: a copy inside each node, a two-leader ring over gRPC, a copy back
    inward, *between, outward = comm.graph_allreduce_phases(S, gpus, "hierarchical")
    assert inward.seconds == pytest.approx(inside)
    assert sum(p.seconds for p in between) == pytest.approx(2 * (2 * IB.latency + overhead + S / 2 / GRPC_BANDWIDTH))
    assert comm.graph_allreduce_phases(S, gpus[:1]) == []


def test_loopback_transfers_follow_the_calibration():
    spec = load_cluster(preset="cpu-local:2")
    cm = CostModel.default()
    comm = cm.comm_model(spec)
    a, b = (d.name for d in spec.devices("CPU"))
    for nbytes in (4096, 2**20, 64 * 2**20):
        (phase,) = comm.transfer_phases(a, b, nbytes)
        assert phase.seconds >= cm.comm.transfers.predict(nbytes)


def test_a_ps_on_the_workers_own_device_is_still_another_task_over_loopback():
    """A PS task on its worker's CPU is another process: every push and pull crosses the node's loopback through
    gRPC, on both directions of the device's port, as between two devices of that node."""
    spec = load_cluster(preset="cpu-local:1")
    cm = CostModel.default()
    comm = cm.comm_model(spec)
    (device,) = (d.name for d in spec.devices("CPU"))
    for nbytes in (4096, 2**20, 64 * 2**20):
        (phase,) = comm.ps_phases(device, device, nbytes)
        assert phase.seconds >= cm.comm.transfers.predict(nbytes)
        assert set(phase.links) == {f"{device}/fabric/tx", f"{device}/fabric/rx"}
    assert comm.transfer_phases(device, device, 2**20) == []  # within one process nothing moves


def test_collectives_between_emulated_nodes_cost_what_was_measured_on_their_links():
    """A collective between emulated nodes takes the allreduce measured on their preset's link: at 10 Gbit/s far
    slower than its line rate (this machine's one core per node copies and sums), at 100 Mbit/s near it (the
    shaped link binds)."""
    cm = CostModel.default()
    for preset, binds in (("emu-10gbit:2", "cores"), ("emu-100mbit:2", "link")):
        spec = load_cluster(preset=preset)
        comm = cm.comm_model(spec)
        devices = [d.name for d in spec.devices("CPU")]
        rate = spec.nodes[0].nics[0].bandwidth
        over_links = sum(p.seconds for p in comm.allreduce_phases(2**21, devices))
        on_collective_ops = sum(p.seconds for p in comm.allreduce_phases(2**21, devices, collective_ops=True))
        latency = comm.effective_path(*devices)[1]
        assert on_collective_ops == pytest.approx(2 * latency + cm.comm.emulated_link.allreduce_seconds(rate, 2**21))
        assert (on_collective_ops > 1.5 * over_links) == (binds == "cores"), preset


def test_collective_ops_price_each_algorithm_as_its_stages_run():
    """On collective ops each algorithm is priced as launcher.runtime.collective issues it (the stages of
    autodist.collective_stages): where it cannot differ (one replica per node) every algorithm is the ring; on 2
    nodes of 8 GPUs hierarchical and master are their stages (a collective per sub-group, the groups at once)."""
    from autodist.collective_stages import stages

    cm = CostModel.default()
    spec = load_cluster(preset="emu-1gbit:2")
    comm = cm.comm_model(spec)
    devices = [d.name for d in spec.devices("CPU")]
    on_ops = {a: comm.allreduce_phases(2**24, devices, a, collective_ops=True) for a in ("ring", "hierarchical", "master")}
    assert on_ops["hierarchical"] == on_ops["master"] == on_ops["ring"]
    spec = load_cluster(preset="p3.16xlarge:2")
    comm = cm.comm_model(spec)
    gpus = [d.name for d in spec.devices("GPU")]
    S = 2**26
    ring = comm.allreduce_phases(S, gpus, "ring", collective_ops=True)
    scatter, across, gather = comm.allreduce_phases(S, gpus, "hierarchical", collective_ops=True)
    node0 = gpus[:8]
    assert scatter.seconds == pytest.approx(sum(p.seconds for p in comm._one_ring("reducescatter", S, node0)))
    assert gather.seconds == pytest.approx(sum(p.seconds for p in comm._one_ring("allgather", S, node0)))
    # eight shard groups cross the nodes' NICs at once: the NICs carry all of them
    _, across_stage, _ = stages("hierarchical", [spec.device(d).node for d in gpus])
    one = sum(p.seconds for p in comm.allreduce_phases(S / 8, [gpus[r] for r in across_stage.groups[0]],
                                                       collective_ops=True))
    assert one < across.seconds <= 8 * one + 1e-12
    inside, *masters, bcast = comm.allreduce_phases(S, gpus, "master", collective_ops=True)
    # one group among the masters: its collective's phases, as the ring pricer gives them
    assert masters == comm.allreduce_phases(S, [gpus[0], gpus[8]], collective_ops=True)
    assert bcast.seconds == pytest.approx(sum(p.seconds for p in comm._one_ring("broadcast", S, node0)))
    totals = {a: sum(p.seconds for p in phases) for a, phases in
              (("ring", ring), ("hierarchical", [scatter, across, gather]), ("master", [inside, *masters, bcast]))}
    assert len(set(totals.values())) == 3
    by_ops = {a: comm.allreduce_time(2**24, gpus, a) for a in ("ring", "hierarchical", "master")}
    assert len(set(by_ops.values())) == 3


def test_a_cpu_collective_takes_its_loopback_work_from_the_compute_beside_it():
    """Between emulated nodes (one core each), a collective op's copies, sums and gRPC work run on the core the
    replica computes on: nearly all of its time at 10 Gbit/s, where that work binds; a small share at 100 Mbit/s,
    where the link does.  GPUs keep the fitted NCCL contention; ordinary ops (the one-client runtime) take none."""
    from cost_models.collectives import ring_allreduce_seconds

    cm = CostModel.default()
    nbytes = 2**22
    loopback = ring_allreduce_seconds(cm.comm.collectives.predict, nbytes, 2)
    shares = {}
    for preset in ("emu-10gbit:2", "emu-100mbit:2"):
        spec = load_cluster(preset=preset)
        comm = cm.comm_model(spec)
        devices = [d.name for d in spec.devices("CPU")]
        seconds = sum(p.seconds for p in comm.allreduce_phases(nbytes, devices, collective_ops=True))
        shares[preset] = comm.compute_contention(devices, nbytes=nbytes, seconds=seconds)
        assert shares[preset] == pytest.approx(min(1.0, loopback / seconds))
        assert comm.compute_contention(devices, collective_ops=False, nbytes=nbytes, seconds=seconds) is None
    assert shares["emu-10gbit:2"] > 0.9 and shares["emu-100mbit:2"] < 0.2
    gpus = load_cluster(preset="dgx-h100:2")
    assert cm.comm_model(gpus).compute_contention(_gpus(gpus), nbytes=nbytes, seconds=1.0) == cm.comm.overlap.contention


def test_ps_fan_in_more_workers_on_one_server_take_longer():
    spec = load_cluster(preset="cpu-local:5")
    comm = CostModel.default().comm_model(spec)
    cpus = [d.name for d in spec.devices("CPU")]
    ps, workers = cpus[0], cpus[1:]
    nbytes = 16 * 2**20

    def round_time(n):
        pushes = [comm.ps_phases(w, ps, nbytes) for w in workers[:n]]
        return max(link_busy(pushes).values())

    times = [round_time(n) for n in (1, 2, 4)]
    assert times[0] < times[1] < times[2]
    assert times[2] == pytest.approx(4 * times[0])  # the server's NIC carries every push


def test_sparse_gradients_move_only_touched_rows():
    dense = VariableInfo("emb", [10000, 16], "float32", 10000 * 64)
    sparse = VariableInfo("emb", [10000, 16], "float32", 10000 * 64, sparse_gradient=True, rows_touched=40)
    assert gradient_bytes(dense) == 640000
    assert gradient_bytes(sparse) == 40 * (64 + 8)


def test_calibration_fit_recovers_a_line_and_loads(tmp_path):
    sizes = [4096 * 4**k for k in range(8)]
    overhead, bandwidth = fit_line(sizes, [300e-6 + s / 1.5e9 for s in sizes])
    assert overhead == pytest.approx(300e-6, rel=1e-6)
    assert bandwidth == pytest.approx(1.5e9, rel=1e-6)
    cal = TransferCalibration(overhead, bandwidth, [{"bytes": s, "seconds": 300e-6 + s / 1.5e9, "repeats": 3} for s in sizes])
    cal.save(tmp_path / "c.json")
    again = TransferCalibration.load(tmp_path / "c.json")
    assert again.predict(2**20) == pytest.approx(300e-6 + 2**20 / 1.5e9, rel=1e-3)
    (tmp_path / "bad.json").write_text('{"format": "something"}')
    from autodist.errors import CostModelError

    with pytest.raises(CostModelError, match="bad.json"):
        TransferCalibration.load(tmp_path / "bad.json")


def test_a_ring_across_nodes_crosses_on_every_nic():
    """NCCL's multi-rail: one ring per NIC, so a flat ring over nodes of 4 NICs has 4 NICs' bandwidth between nodes."""
    S, n = 2**30, 16
    four = CommModel(_cluster(2, 8, nics_per_node=4))
    B = min(4 * IB.bandwidth * LINK_EFFICIENCY["infiniband"], NVLINK.bandwidth * LINK_EFFICIENCY["nvlink"])
    a = 2 * IB.latency
    assert four.allreduce_time(S, _gpus(four.resource_spec), "ring") == pytest.approx(
        2 * (n - 1) / n * S / B + 2 * (n - 1) * a)
    phase = four.allreduce_phases(S, _gpus(four.resource_spec), "ring")[0]
    assert {f"n{i}/nic{k}/{way}" for i in range(2) for k in range(4) for way in ("tx", "rx")} <= set(phase.links)
    one = CommModel(_cluster(2, 8, nics_per_node=1))
    assert one.allreduce_time(S, _gpus(one.resource_spec), "ring") == pytest.approx(
        2 * (n - 1) / n * S / (IB.bandwidth * LINK_EFFICIENCY["infiniband"]) + 2 * (n - 1) * a)
    # Two GPUs a node use only their own two NICs.
    pair = [f"n{i}/GPU:{g}" for i in range(2) for g in (0, 4)]
    assert four.allreduce_time(S, pair, "ring") == pytest.approx(
        2 * 3 / 4 * S / (2 * IB.bandwidth * LINK_EFFICIENCY["infiniband"]) + 2 * 3 * a)


def test_collectives_of_processes_sharing_an_emulated_nodes_core_take_turns():
    """Two replicas on an emulated node of one core: their collective's CPU work (copies, sums, gRPC) takes turns
    on that core: the loopback measurement of two processes times what the same collective measured with both
    pinned to one core (less than twice: one's waits for the other's messages leave the core to it)."""
    import os

    from cost_models.collectives import ring_allreduce_seconds

    cm = CostModel.default()
    spec = load_cluster(os.path.join(os.path.dirname(__file__), "..", "benchmarks", "clusters", "emu-1gbit-2x2.yaml"))
    comm = cm.comm_model(spec)
    pair = ["emu-0/CPU:0", "emu-0/CPU:1"]
    measured = ring_allreduce_seconds(cm.comm.collectives.predict, 2**24, 2)
    assert spec.cores_of(pair[0]) == 1
    factor = cm.comm.collectives.shared_core_factor(2**24)
    assert 1.0 < factor < 2.0  # measured 1.24x here
    assert sum(p.seconds for p in comm.allreduce_phases(2**24, pair, collective_ops=True)) == pytest.approx(
        measured * factor)


def test_the_shared_core_factor_is_the_measured_ratio_between_the_sizes_measured_both_ways():
    """Log-log between the sizes timed both ways, the nearest one's beyond them; None for a calibration without
    the shared-core timings (an older collective profile)."""
    from cost_models.calibration import TransferCalibration

    alone = [{"bytes": 2**20, "seconds": 0.002}, {"bytes": 2**24, "seconds": 0.030}, {"bytes": 2**26, "seconds": 0.1}]
    shared = [{"bytes": 2**20, "seconds": 0.0036}, {"bytes": 2**24, "seconds": 0.045}]
    calibration = TransferCalibration(0.001, 5e8, alone, shared_core=shared)
    assert calibration.shared_core_factor(2**20) == pytest.approx(1.8)
    assert calibration.shared_core_factor(2**22) == pytest.approx((1.8 * 1.5) ** 0.5)  # halfway in log size
    assert calibration.shared_core_factor(2**10) == pytest.approx(1.8)
    assert calibration.shared_core_factor(2**26) == pytest.approx(1.5)  # the largest size timed both ways
    assert TransferCalibration(0.001, 5e8, alone).shared_core_factor(2**20) is None
