"""Links as achieved: the fraction of line rate each kind of link reaches, and the paths between devices."""

from __future__ import annotations

from autodist.errors import CostModelError, InputError
from autodist.resource_spec.spec import receive_link, send_link
from cost_models.comm.phases import hops


# Fraction of a link's per-direction line rate that transfers and collectives
# achieve, by link kind.
#  - nvlink, infiniband, roce (RDMA over Ethernet, EFA included): fitted on
#    the nccl-tests allreduce rows of the calibration set
#    (cost_models.fitting.collectives_published: nvlink on C1, C7, C11 and C4's ring,
#    infiniband on C7, C8, C9 and C15, roce on C14's three EFA rows), the
#    median of what each row implies; tests/test_collective_cli.py checks
#    these equal a fresh fit.
#  - pcie: Gen3 x16 measures ~12.6 of 15.75 GB/s (hardware.md, "Links"):
#    host-device copies, and GPUs peer to peer behind a PCIe switch.
#  - pcie-cpu: GPUs that reach each other through the CPU's host bridge
#    (a PCIe fabric with ``via_cpu``), staged in host memory; fitted on row
#    C13's 3-GPU allreduce (cost_models.fitting.collectives_published).
#  - nvlink-bridge: the two GPUs of an NVLink-bridged pair (a node's
#    ``bridge``); fitted on row C13's 2-GPU allreduce over an NV12 pair.
#  - ethernet (TCP, no RDMA): 60-80% of line rate achieved (hardware.md); 0.7.
#  - loopback: the TensorFlow gRPC calibration already measures achieved
#    bandwidth, so it is used as is.
LINK_EFFICIENCY = {
    "nvlink": 0.774,
    "pcie": 0.8,
    "pcie-cpu": 0.635,
    "nvlink-bridge": 0.693,
    "ethernet": 0.7,
    "infiniband": 0.935,
    "roce": 0.640,
    "loopback": 1.0,
}

# NVLink SHARP (NVLS): inside a Hopper NVSwitch node NCCL reduces in the
# switch, each GPU sending and receiving the message once:
# t = S / (B * NVLS_EFFICIENCY) + 2a.  Fitted on the calibration set's rows
# C2 (8x H100, NVLS, 478.87 GB/s busbw at 8 GiB: algbw 273.6 GB/s) and C4
# (NCCL maintainer: ~480 busbw, algbw ~275 GB/s) of
# ../shared/reference/published-training-figures.md: algbw over NVLink's
# 450 GB/s per direction (cost_models.fitting.collectives_published).
NVLS_EFFICIENCY = 0.609
NVLS_ARCHITECTURES = ("hopper",)

# TensorFlow's gRPC between tasks (PS pushes and pulls, hybrid plans'
# allreduce) runs over TCP even on an RDMA NIC, through host memory: the NIC
# at the TCP efficiency above ("ethernet"), and at most GRPC_BANDWIDTH per
# transfer: one study fitted t = 134 us + bytes / 5.7 GB/s for GPU-to-GPU
# copies through TensorFlow (hardware.md, "Cost formulas in common use").
GRPC_BANDWIDTH = 5.7e9
TCP_EFFICIENCY = LINK_EFFICIENCY["ethernet"]
GRPC_MEDIA = frozenset({"loopback", "ethernet"})


class Links:
    """The achieved bandwidth and latency of paths on ``self.resource_spec`` (a part of :class:`CommModel`)."""

    def link_efficiency(self, kind, rdma=False):
        """Achieved fraction of line rate on a link of ``kind`` (Ethernet with RDMA counts as RoCE)."""
        if kind == "ethernet" and rdma:
            kind = "roce"
        if kind not in self.efficiency:
            raise InputError(f"no achieved-bandwidth figure for link kind {kind!r}", field="links")
        return self.efficiency[kind]

    def nic_efficiency(self, node, nic):
        """Achieved fraction of ``nic``'s line rate on ``node``: measured for an emulated node's, else by kind."""
        if node.emulation is None:
            return self.link_efficiency(nic.kind, nic.rdma)
        return self._emulated_efficiency(nic.bandwidth, node.name)

    def _emulated(self, where):
        """What TensorFlow achieves over this machine's emulated links, as measured (CostModelError without)."""
        if self.emulated_link is None:
            raise CostModelError("no emulated link calibration to price emulated nodes' links: run "
                                 "'autodist profile emulated-links' (as root)", source=where)
        return self.emulated_link

    def _emulated_efficiency(self, rate, where):
        """The fraction of an emulated link of ``rate`` bytes/s that TensorFlow's gRPC achieves, as measured."""
        return self._emulated(where).efficiency(rate)

    def _between_emulated_nodes(self, src, dst, path):
        """Whether ``path`` (from ``src`` to ``dst``) goes between two emulated nodes."""
        spec = self.resource_spec
        return (path.kind == "inter-node" and spec.node_of(src).emulation is not None
                and spec.node_of(dst).emulation is not None)

    def effective_path(self, src, dst):
        """(bandwidth, latency, links) of the path ``src -> dst`` as achieved."""
        path = self.resource_spec.path(src, dst)
        if path.kind == "same-device":
            return float("inf"), 0.0, ()
        if self._between_emulated_nodes(src, dst, path):  # the slower NIC sets the path's rate
            return path.bandwidth * self._emulated_efficiency(path.bandwidth, src), path.latency, path.links
        return path.bandwidth * self.link_efficiency(self._gpu_topology(src, dst, path), path.rdma), path.latency, \
            path.links

    def _gpu_topology(self, src, dst, path):
        """The link kind whose efficiency prices ``path``: its medium, or how two GPUs of one node meet (an NVLink
        bridge, or a ``via_cpu`` PCIe fabric)."""
        spec = self.resource_spec
        a, b = spec.device(src), spec.device(dst)
        if path.kind != "intra-node" or not a.kind == b.kind == "GPU":
            return path.medium
        node = spec.node_of(src)
        if node.bridged(a, b):
            return "nvlink-bridge"
        return "pcie-cpu" if path.medium == "pcie" and node.fabric.via_cpu else path.medium

    def _ring_links(self, devices):
        """Slowest achieved bandwidth, largest latency and all links of a ring.

        NCCL runs one ring per NIC (multi-rail): where the ring crosses from
        one node to the next, it crosses on every NIC its devices on those
        nodes send through, so that hop carries their summed bandwidth.  Cached per device order: a pricer asks
        for one ring at several sizes.
        """
        key = tuple(devices)
        ring = self._rings.get(key)
        if ring is None:
            ring = self._rings[key] = self._walk_ring(devices)
        return ring

    def _walk_ring(self, devices):
        spec = self.resource_spec
        rails = {}
        for name in devices:
            device = spec.device(name)
            node = spec.node(device.node)
            if node.nics:
                rails.setdefault(node.name, set()).add(node.nic_for(device))
        bandwidth, latency, links = float("inf"), 0.0, set()
        for a, b in hops(devices):
            bw, lat, ls = self.effective_path(a, b)
            node_a, node_b = spec.device(a).node, spec.device(b).node
            if node_a != node_b:
                bw *= min(len(rails[node_a]), len(rails[node_b]))
                ls = ([send_link(f"{node_a}/nic{k}") for k in sorted(rails[node_a])]
                      + [receive_link(f"{node_b}/nic{k}") for k in sorted(rails[node_b])])
            bandwidth, latency = min(bandwidth, bw), max(latency, lat)
            links.update(ls)
        return bandwidth, latency, tuple(sorted(links))

    def _by_node(self, devices):
        groups = {}
        for name in devices:
            groups.setdefault(self.resource_spec.device(name).node, []).append(name)
        return list(groups.values())

    def _all_gpus(self, devices):
        return all(self.resource_spec.device(d).kind == "GPU" for d in devices)

    def _all_emulated(self, devices):
        """Whether every one of ``devices`` is on an emulated node (a process group of this machine)."""
        spec = self.resource_spec
        return all(spec.node_of(d).emulation is not None for d in devices)

    def _all_loopback(self, devices):
        spec = self.resource_spec
        return all(spec.path(a, b).medium == "loopback" for a, b in hops(devices))

    def _uses_grpc(self, devices):
        """Whether a collective over ``devices`` crosses a link TensorFlow
        drives through gRPC (loopback, TCP Ethernet) and so pays the calibrated
        per-tensor overhead; NCCL over NVLink/PCIe/RDMA pays link latencies only."""
        spec = self.resource_spec
        media = {spec.path(a, b).medium for a, b in hops(devices)}
        return bool(media & GRPC_MEDIA)
