"""ResourceSpec: the cluster as data (nodes, devices, links).

Logical names:
- a device is ``"<node>/<KIND>:<index>"``, e.g. ``"node-0/GPU:3"``;
- a link resource, as the simulator queues on it, is one direction of a
  port: ``"<port>/tx"`` (sending) or ``"<port>/rx"`` (receiving), where the
  port is ``"<device>/fabric"`` (the device's port into its node's
  NVLink/NVSwitch, PCIe or loopback fabric) or ``"<node>/nic<k>"`` (one NIC).
  Links are full duplex: a send and a receive on one port do not contend.

Units: bytes, bytes per second (per direction), seconds, FLOP/s.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace

from autodist.errors import InputError
from autodist.resource_spec.checks import LINK_KINDS, spec_problems
from autodist.resource_spec.measured import MeasuredCollective

FORMAT = "autodist.resource_spec"
VERSION = 1

DIRECTIONS = ("tx", "rx")


def send_link(port):
    """The link resource of ``port``'s sending direction."""
    return f"{port}/tx"


def receive_link(port):
    """The link resource of ``port``'s receiving direction."""
    return f"{port}/rx"


@dataclass
class DeviceSpec:
    """One compute device.  ``peak_flops`` maps dtype name to FLOP/s."""

    name: str
    kind: str
    model: str
    peak_flops: dict
    memory_bytes: int
    memory_bandwidth: float
    node: str = ""
    index: int = 0


@dataclass
class LinkSpec:
    """A link kind with its per-direction bandwidth and latency.

    ``via_cpu``: on a PCIe fabric, GPUs reach each other through the CPU's
    host bridge, staged in host memory (no peer-to-peer through a PCIe
    switch); written only where true.
    """

    kind: str
    bandwidth: float
    latency: float
    rdma: bool = False
    gpudirect: bool = False
    via_cpu: bool = False


@dataclass
class EmulatedNode:
    """A node that ``autodist run`` emulates on this machine (see launcher.emulation).

    Its tasks run in a network namespace of their own, pinned to the CPU
    ``cores`` listed (:meth:`ResourceSpec.cores_of`), and its link is shaped
    to its NIC's bandwidth in each direction, with ``delay`` seconds added
    each way (netem) when positive.
    """

    cores: list[int]
    delay: float = 0.0


@dataclass
class NodeSpec:
    """One machine: its devices, the fabric between them and its NICs.

    ``host_link``, when given, joins the host CPU to the GPUs (PCIe); without
    it a CPU device reaches the other devices over ``fabric``.  ``bridge``,
    when given, joins the GPUs in pairs (GPU 0 with 1, 2 with 3, ...: NVLink
    bridges), each GPU's port ``"<device>/bridge"``; other pairs of GPUs
    talk over ``fabric``.  ``emulation`` is set on the nodes of an emulated
    cluster; ``bridge`` and ``emulation`` are written only where set.
    """

    name: str
    devices: list[DeviceSpec]
    fabric: LinkSpec
    nics: list[LinkSpec] = field(default_factory=list)
    address: str = ""
    labels: dict = field(default_factory=dict)
    host_link: LinkSpec | None = None
    emulation: EmulatedNode | None = None
    bridge: LinkSpec | None = None

    def bridged(self, a, b):
        """Whether devices ``a`` and ``b`` of this node are GPUs of one bridged pair."""
        return self.bridge is not None and a.kind == b.kind == "GPU" and a.index // 2 == b.index // 2

    def gpus(self):
        return [d for d in self.devices if d.kind == "GPU"]

    def port_of(self, device):
        """The link a device's bytes take inside this node (fabric or host link)."""
        if device.kind == "CPU" and self.host_link is not None:
            return self.host_link
        return self.fabric

    def devices_on_nic(self, k):
        """The devices that send through NIC ``k`` (see :meth:`nic_for`)."""
        return [d for d in self.devices if self.nics and self.nic_for(d) == k]

    def gpus_per_nic(self):
        """How many GPUs share one NIC (at most), 0 without GPUs or NICs."""
        if not self.nics:
            return 0
        return max(sum(d.kind == "GPU" for d in self.devices_on_nic(k)) for k in range(len(self.nics)))

    def nic_for(self, device):
        """Index of the NIC a device sends through (round-robin over GPUs)."""
        if not self.nics:
            raise InputError("has no NIC but talks to another node", field=f"nodes.{self.name}.nics")
        gpus = self.gpus()
        if device.kind == "GPU" and gpus:
            return gpus.index(device) * len(self.nics) // len(gpus)
        return 0

    def nic_bandwidth(self):
        return sum(n.bandwidth for n in self.nics)


@dataclass(frozen=True)
class Path:
    """How bytes go from one device to another.

    ``links`` are the link resources a transfer occupies, all at once: the
    sending direction of the source's port and the receiving direction of
    the destination's;
    ``bandwidth`` is the slowest link on the way (a GPU's host PCIe counts
    when its NIC has no GPUDirect RDMA); ``latency`` is end to end (both NICs
    across nodes, the slower port inside one).
    ``medium`` is the link kind that sets the bandwidth (one of
    ``LINK_KINDS``; empty on the same device).
    """

    kind: str  # "same-device" | "intra-node" | "inter-node"
    links: tuple
    bandwidth: float
    latency: float
    rdma: bool = False
    medium: str = ""


class ResourceSpec:
    """The cluster: an ordered list of nodes.

    Parameters
    ----------
    nodes : list of NodeSpec
    name : str
        A label for reports (a preset name, a file name).
    collectives : sequence of autodist.resource_spec.measured.MeasuredCollective
        Collectives measured on this cluster (``autodist cluster calibrate``), priced from their curves.
    """

    def __init__(self, nodes, name="", collectives=()):
        self.nodes = list(nodes)
        self.name = name
        self.collectives = tuple(collectives)
        self._nodes = {n.name: n for n in self.nodes}
        self._devices = {d.name: d for n in self.nodes for d in n.devices}
        self._paths = {}  # (src, dst) -> Path: a search prices the same pairs again and again

    # -- lookups ---------------------------------------------------------
    def devices(self, kind=None):
        return [d for d in self._devices.values() if kind is None or d.kind == kind]

    def gpus(self):
        return self.devices("GPU")

    def device(self, name):
        try:
            return self._devices[name]
        except KeyError:
            raise InputError(f"unknown device {name!r}") from None

    def node(self, name):
        try:
            return self._nodes[name]
        except KeyError:
            raise InputError(f"unknown node {name!r}") from None

    def node_of(self, device_name):
        return self._nodes[self.device(device_name).node]

    def compute_devices(self):
        """GPUs if the cluster has any, else CPUs: where replicas run."""
        return self.gpus() or self.devices("CPU")

    def alone(self, device_name):
        """The cluster of compute device ``device_name`` alone: its node with that device, no other compute device
        and no NIC (a GPU keeps its node's CPUs, as a user's one-GPU machine has them)."""
        device = self.device(device_name)
        node = self.node_of(device_name)
        kept = [d for d in node.devices if d.name == device_name or (device.kind == "GPU" and d.kind == "CPU")]
        return ResourceSpec([replace(node, devices=kept, nics=[], bridge=None)], name=f"one {device.model}")

    def cores_of(self, device_name):
        """The CPU cores a CPU device's processes are pinned to, on an emulated node; None elsewhere (all of them).

        An emulated node's CPU keeps the figures of the machine its costs
        were measured on, of which it gets this many cores.
        """
        node = self.node_of(device_name)
        if node.emulation is None or self.device(device_name).kind != "CPU":
            return None
        return len(node.emulation.cores)

    @property
    def emulated(self):
        """True when every node is emulated on this machine (``emu-*`` presets, ``network: {emulate: true}``)."""
        return bool(self.nodes) and all(n.emulation is not None for n in self.nodes)

    # -- paths -----------------------------------------------------------
    def path(self, src, dst):
        """The :class:`Path` from device ``src`` to device ``dst``."""
        found = self._paths.get((src, dst))
        if found is None:
            found = self._paths[(src, dst)] = self._path(src, dst)
        return found

    def _path(self, src, dst):
        a, b = self.device(src), self.device(dst)
        if a.name == b.name:
            return Path("same-device", (), float("inf"), 0.0)
        na, nb = self._nodes[a.node], self._nodes[b.node]
        if na is nb and na.bridged(a, b):
            links = (send_link(f"{a.name}/bridge"), receive_link(f"{b.name}/bridge"))
            return Path("intra-node", links, na.bridge.bandwidth, na.bridge.latency, medium=na.bridge.kind)
        if na is nb:
            slow = min(na.port_of(a), na.port_of(b), key=lambda link: (link.bandwidth, link.kind))
            links = (send_link(f"{a.name}/fabric"), receive_link(f"{b.name}/fabric"))
            latency = max(na.port_of(a).latency, na.port_of(b).latency)
            return Path("intra-node", links, slow.bandwidth, latency, medium=slow.kind)
        nic_a = na.nics[na.nic_for(a)]
        nic_b = nb.nics[nb.nic_for(b)]
        links = (send_link(f"{na.name}/nic{na.nic_for(a)}"), receive_link(f"{nb.name}/nic{nb.nic_for(b)}"))
        latency = nic_a.latency + nic_b.latency
        candidates = [nic_a, nic_b]
        # Without GPUDirect RDMA a GPU's bytes also cross its host's PCIe.
        for node, dev, nic in ((na, a, nic_a), (nb, b, nic_b)):
            if dev.kind == "GPU" and not nic.gpudirect:
                if node.host_link is not None:
                    candidates.append(node.host_link)
                elif node.fabric.kind == "pcie":
                    candidates.append(node.fabric)
        slow = min(candidates, key=lambda link: (link.bandwidth, link.kind))
        return Path("inter-node", links, slow.bandwidth, latency, rdma=nic_a.rdma and nic_b.rdma, medium=slow.kind)

    def link_bandwidths(self):
        """Every link resource name (each direction of each port) with its bandwidth (bytes/s)."""
        ports = {}
        for node in self.nodes:
            for d in node.devices:
                ports[f"{d.name}/fabric"] = node.port_of(d).bandwidth
                if node.bridge is not None and d.kind == "GPU":
                    ports[f"{d.name}/bridge"] = node.bridge.bandwidth
            for k, nic in enumerate(node.nics):
                ports[f"{node.name}/nic{k}"] = nic.bandwidth
        return {f"{port}/{way}": bw for port, bw in ports.items() for way in DIRECTIONS}

    # -- serialisation ---------------------------------------------------
    def to_dict(self):
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "nodes": [_node_dict(n) for n in self.nodes],
            # only where measured, so the documents and hashes of other clusters stay as they were
            **({"collectives": [c.to_dict() for c in self.collectives]} if self.collectives else {}),
        }

    def content_hash(self):
        body = dict(self.to_dict(), name="")
        text = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @classmethod
    def from_dict(cls, data, where="<resource spec>"):
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"not an autodist resource spec (expected format {FORMAT!r})", source=where)
        if data.get("version") != VERSION:
            raise InputError(f"unsupported version {data.get('version')!r}", source=where, field="version")
        nodes = []
        for i, n in enumerate(data.get("nodes") or []):
            try:
                n = dict(n)
                n["devices"] = [DeviceSpec(**d) for d in n["devices"]]
                n["fabric"] = LinkSpec(**n["fabric"])
                n["nics"] = [LinkSpec(**k) for k in n.get("nics", [])]
                for key in ("host_link", "bridge"):
                    if n.get(key) is not None:
                        n[key] = LinkSpec(**n[key])
                if n.get("emulation") is not None:
                    n["emulation"] = EmulatedNode(**n["emulation"])
                nodes.append(NodeSpec(**n))
            except (KeyError, TypeError, ValueError) as exc:
                message = f"malformed node ({type(exc).__name__}: {exc})"
                raise InputError(message, source=where, field=f"nodes[{i}]") from None
        if not nodes:
            raise InputError("no nodes", source=where, field="nodes")
        for field_name, message in spec_problems(nodes):
            raise InputError(message, source=where, field=field_name)
        name = data.get("name", "")
        if not isinstance(name, str):
            raise InputError(f"must be a string, got {name!r:.60}", source=where, field="name")
        collectives = []
        for i, c in enumerate(data.get("collectives") or []):
            try:
                collectives.append(MeasuredCollective(**{**c, "sizes": tuple(c["sizes"]),
                                                         "seconds": tuple(c["seconds"])}))
            except (KeyError, TypeError) as exc:
                raise InputError(f"malformed measured collective ({exc})", source=where,
                                 field=f"collectives[{i}]") from None
        return cls(nodes, name=name, collectives=collectives)

    def __eq__(self, other):
        return isinstance(other, ResourceSpec) and self.content_hash() == other.content_hash()

    def __repr__(self):
        return f"ResourceSpec({self.name!r}, nodes={len(self.nodes)}, devices={len(self._devices)})"


def _node_dict(node):
    """``asdict(node)``, without ``emulation`` on a real node, ``bridge`` where there is none, nor a link's false
    ``via_cpu`` (so its documents and hashes stay as they were)."""
    out = asdict(node)
    for key in ("emulation", "bridge"):
        if out[key] is None:
            del out[key]
    for link in [out["fabric"], out["host_link"], out.get("bridge"), *out["nics"]]:
        if link is not None and not link["via_cpu"]:
            del link["via_cpu"]
    return out
