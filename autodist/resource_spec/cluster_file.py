"""cluster.yaml: read a cluster description, validate it strictly, write it back.

A file lists nodes; an entry with ``count`` is a group of identical nodes
named ``<name>-0 .. <name>-<count-1>``::

    name: lab                         # optional, defaults to the file name
    nodes:
      - name: gpu                     # or only an address (the name then)
        count: 2
        preset: dgx-h100              # optional: start from a machine preset
      - name: t4box
        address: 10.0.0.7
        cpus: {model: xeon-8259cl-24c}
        gpus: {model: T4, count: 4}   # or explicit figures, see below
        fabric: {kind: pcie, generation: 3}
        nics:
          - {kind: ethernet, speed: 50 Gb/s, latency: 15 us}

Devices (``gpus``/``cpus``, one entry or a list): ``model`` (a device preset),
``count`` (default 1), and for a model autodist does not know, or to override
one: ``peak_flops`` (dtype -> FLOP/s), ``memory``, ``memory_bandwidth`` (the
last two may be ``unknown``, as discovery writes them for unknown products).
Links (``fabric``, ``host_link``, each of ``nics``): a link preset name
(``ib-ndr``, ``pcie-gen4``...), or ``{preset | kind, bandwidth | speed |
generation, latency, rdma, gpudirect, via_cpu}``; NICs also take ``count``.  Kinds:
nvlink (or nvswitch), pcie, loopback, infiniband, roce, ethernet.  Without a
``fabric`` a node gets its GPU model's (else PCIe Gen4); latency defaults by
kind, rdma to true for infiniband and roce.  ``via_cpu: true`` on a pcie
fabric: its GPUs reach each other through the CPU's host bridge (no PCIe
switch between them), priced slower than peer to peer.  ``bridge`` (an
nvlink link): NVLink bridges join the GPUs in pairs (0-1, 2-3, ...), the
other pairs talk over the fabric.

A cluster emulated on this machine (``autodist run`` builds it with network
namespaces and ``tc``, see resource_spec/emulated.py) says so at the top,
and its nodes may add a ``delay`` to each direction of their link::

    network: {emulate: true}
    nodes:
      - {name: a, preset: cpu-local, nics: [{kind: ethernet, speed: 100 Mb/s}]}
      - {name: b, preset: cpu-local, nics: [{kind: ethernet, speed: 100 Mb/s}], delay: 1 ms}

Each node of an emulated cluster has at most one NIC; its latency is the
emulated link's (a veth's, plus the delay).

Quantities are numbers in the field's default unit (bandwidth GB/s, speed
Gb/s, latency us, memory GB, peak_flops TFLOP/s) or strings with a unit
(``"400 Gb/s"``, ``"80 GiB"``, ``"2 us"``).  A file in the JSON format of
``ResourceSpec.to_dict`` is accepted too.
"""

from __future__ import annotations

import decimal
import difflib
import json
import os
import re
from dataclasses import replace

import yaml

from autodist.errors import InputError
from autodist.resource_spec import presets
from autodist.resource_spec.measured import COLLECTIVES, MeasuredCollective
from autodist.resource_spec.spec import FORMAT, LINK_KINDS, DeviceSpec, LinkSpec, NodeSpec, ResourceSpec

# unit name -> factor to the base unit, per quantity; the first unit is the default.
UNITS = {
    "bandwidth": {"GB/s": 1e9, "B/s": 1, "KB/s": 1e3, "MB/s": 1e6, "TB/s": 1e12, "Gb/s": 1.25e8,
                  "Mb/s": 1.25e5, "Tb/s": 1.25e11, "GiB/s": 2**30, "MiB/s": 2**20},
    "speed": {"Gb/s": 1.25e8, "Mb/s": 1.25e5, "Tb/s": 1.25e11, "GB/s": 1e9, "B/s": 1},
    "latency": {"us": 1e-6, "s": 1, "ms": 1e-3, "ns": 1e-9},
    "memory": {"GB": 10**9, "B": 1, "KB": 10**3, "MB": 10**6, "TB": 10**12, "KiB": 2**10,
               "MiB": 2**20, "GiB": 2**30, "TiB": 2**40},
    "flops": {"TFLOP/s": 1e12, "FLOP/s": 1, "GFLOP/s": 1e9, "PFLOP/s": 1e15},
}
# Latency of a link kind when the file gives none (per side; see presets).
DEFAULT_LATENCY = {"nvlink": 1e-6, "pcie": 1e-6, "loopback": 5e-6, "infiniband": 0.75e-6,
                   "roce": 1.5e-6, "ethernet": 15e-6}
PCIE_GENERATIONS = {3: "pcie-gen3", 4: "pcie-gen4", 5: "pcie-gen5"}
# An NVSwitch fabric is NVLink through switches: the same per-GPU link figures.
KIND_ALIASES = {"nvswitch": "nvlink"}

# Sanity limit (with presets.MAX_NODES) that catches a typo'd count early.
MAX_PER_GROUP = 1024

TOP_KEYS = ("name", "network", "nodes", "collectives")
COLLECTIVE_KEYS = ("op", "nodes", "ranks_per_node", "points", "source")
NETWORK_KEYS = ("emulate",)
NODE_KEYS = ("name", "address", "addresses", "count", "preset", "cpus", "gpus", "fabric",
             "host_link", "bridge", "nics", "labels", "delay")
DEVICE_KEYS = ("model", "count", "peak_flops", "memory", "memory_bandwidth")
LINK_KEYS = ("preset", "kind", "bandwidth", "speed", "generation", "latency", "rdma", "gpudirect", "via_cpu")
NIC_KEYS = LINK_KEYS + ("count",)

# libyaml's safe loader and dumper where PyYAML has them: same documents, much faster.
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SAFE_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)

_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-z/]*)\s*$")


class _Reader:
    """Validation helpers that name the file and the field in every error."""

    def __init__(self, source):
        self.source = source

    def fail(self, field, message):
        raise InputError(message, source=self.source, field=field)

    def mapping(self, value, field, allowed):
        if not isinstance(value, dict):
            self.fail(field, f"expected a mapping, got {_show(value)}")
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
                hint = f" (did you mean {close[0]!r}?)" if close else f"; allowed: {', '.join(allowed)}"
                self.fail(field, f"unknown key {key!r}{hint}")
        return value

    def entries(self, value, field):
        """A single mapping or a list of them, as a list."""
        if isinstance(value, dict):
            return [(field, value)]
        if isinstance(value, list) and value:
            return [(f"{field}[{i}]", v) for i, v in enumerate(value)]
        self.fail(field, f"expected a mapping or a non-empty list, got {_show(value)}")

    def text(self, value, field):
        if not isinstance(value, str) or not value:
            self.fail(field, f"expected a non-empty string, got {_show(value)}")
        return value

    def flag(self, value, field):
        if not isinstance(value, bool):
            self.fail(field, f"expected true or false, got {_show(value)}")
        return value

    def count(self, value, field, most):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            self.fail(field, f"must be a positive integer, got {_show(value)}")
        if value > most:
            self.fail(field, f"must be at most {most}, got {value}")
        return value

    def quantity(self, value, field, quantity):
        """A positive float in base units from a number or ``"<number> <unit>"``."""
        number, unit = self._split(value, field, quantity)
        result = float(number) * UNITS[quantity][unit]
        if not result > 0 or result == float("inf"):
            self.fail(field, f"must be positive, got {_show(value)}")
        return result

    def memory(self, value, field):
        """A positive whole number of bytes."""
        number, unit = self._split(value, field, "memory")
        result = decimal.Decimal(number) * UNITS["memory"][unit]
        if result <= 0:
            self.fail(field, f"must be positive, got {_show(value)}")
        if result != result.to_integral_value():
            self.fail(field, f"must be a whole number of bytes, got {_show(value)}")
        return int(result)

    def _split(self, value, field, quantity):
        units = UNITS[quantity]
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            self.fail(field, f"expected a number or '<number> <unit>', got {_show(value)}")
        match = _QUANTITY.match(str(value))
        if not match:
            self.fail(field, f"expected a number or '<number> <unit>', got {_show(value)}")
        number, unit = match.groups()
        unit = unit or next(iter(units))
        if unit not in units:
            self.fail(field, f"unknown unit {unit!r}; use one of {', '.join(units)}")
        return number, unit


def _show(value):
    return repr(value) if isinstance(value, str) else str(value)


# -- reading ---------------------------------------------------------------


def read_cluster_file(path):
    """The :class:`ResourceSpec` described by a cluster.yaml (or spec JSON) file.

    Raises
    ------
    InputError
        Missing file, malformed YAML or any invalid field, naming the file and field.
    """
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise InputError("no such file", source=path) from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a cluster file", source=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read ({getattr(exc, 'strerror', None) or exc})", source=path) from None
    default_name = os.path.splitext(os.path.basename(path))[0]
    return parse_cluster(text, source=path, default_name=default_name)


def parse_cluster(text, source="<cluster>", default_name="cluster"):
    """The :class:`ResourceSpec` described by cluster YAML ``text``."""
    data = _load_text(text, source)
    if isinstance(data, dict) and data.get("format") == FORMAT:
        try:
            return ResourceSpec.from_dict(data, where=source)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"malformed resource spec ({exc})", source=source) from None
    return cluster_from_dict(data, source=source, default_name=default_name)


def _load_text(text, source):
    if text.lstrip().startswith("{"):
        try:  # JSON first: YAML 1.1 reads JSON's 1e-06 as a string
            return json.loads(text)
        except json.JSONDecodeError:
            pass
    try:
        return yaml.load(text, Loader=SAFE_LOADER)
    except yaml.YAMLError as exc:
        raise InputError(f"malformed YAML ({_yaml_problem(exc)})", source=source) from None


def _yaml_problem(exc):
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{problem}{where}"


def cluster_from_dict(data, source="<cluster>", default_name="cluster"):
    """The :class:`ResourceSpec` of a parsed cluster document (see module doc)."""
    reader = _Reader(source)
    if data is None:
        reader.fail("nodes", "the file is empty; list at least one node")
    reader.mapping(data, "(top level)", TOP_KEYS)
    name = reader.text(data["name"], "name") if "name" in data else default_name
    if "nodes" not in data:
        reader.fail("nodes", "missing; list at least one node")
    nodes_field = data["nodes"]
    if not isinstance(nodes_field, list) or not nodes_field:
        reader.fail("nodes", f"expected a non-empty list of nodes, got {_show(nodes_field)}")
    emulated = _read_network(reader, data.get("network", {}))
    nodes, seen, delays = [], {}, []
    for i, entry in enumerate(nodes_field):
        field = f"nodes[{i}]"
        delay = _read_delay(reader, entry, field, emulated)
        for node in _read_node_group(reader, entry, field):
            if node.name in seen:
                reader.fail(f"{field}.name", f"duplicate node name {node.name!r} (also {seen[node.name]})")
            seen[node.name] = field
            nodes.append(node)
            delays.append(delay)
    if len(nodes) > 1:
        for node in nodes:
            if not node.nics:
                reader.fail(f"{seen[node.name]}.nics", f"node {node.name!r} needs a NIC to reach the other nodes")
    if emulated:
        nodes = _emulated_nodes(reader, nodes, delays, seen)
    collectives = _read_collectives(reader, data.get("collectives", []), nodes)
    return ResourceSpec(nodes, name=name, collectives=collectives)


def _read_collectives(reader, value, nodes):
    """Measured collectives: ``{op, nodes, ranks_per_node, points: [[bytes, time], ...], source}``, times in us
    (nccl-tests' unit) or with a unit; each of a shape the cluster has."""
    if not isinstance(value, list):
        reader.fail("collectives", f"expected a list, got {_show(value)}")
    out = []
    for i, entry in enumerate(value):
        field = f"collectives[{i}]"
        reader.mapping(entry, field, COLLECTIVE_KEYS)
        for key in ("op", "nodes", "ranks_per_node", "points"):
            if key not in entry:
                reader.fail(f"{field}.{key}", "missing")
        op = reader.text(entry["op"], f"{field}.op")
        if op not in COLLECTIVES:
            reader.fail(f"{field}.op", f"unknown collective {op!r}; use one of {', '.join(COLLECTIVES)}")
        count = reader.count(entry["nodes"], f"{field}.nodes", len(nodes))
        ranks = reader.count(entry["ranks_per_node"], f"{field}.ranks_per_node",
                             min(len(n.gpus()) for n in nodes[:count]) or 1)
        points = entry["points"]
        if not isinstance(points, list) or not points:
            reader.fail(f"{field}.points", f"expected a non-empty list of [bytes, time] pairs, got {_show(points)}")
        sizes, seconds = [], []
        for k, point in enumerate(points):
            where = f"{field}.points[{k}]"
            if not isinstance(point, list) or len(point) != 2:
                reader.fail(where, f"expected [bytes, time], got {_show(point)}")
            size = reader.count(point[0], where, 2**62)
            if sizes and size <= sizes[-1]:
                reader.fail(where, f"sizes must increase, {size} follows {sizes[-1]}")
            sizes.append(size)
            seconds.append(reader.quantity(point[1], where, "latency"))
        source = reader.text(entry["source"], f"{field}.source") if "source" in entry else ""
        out.append(MeasuredCollective(op, count, ranks, tuple(sizes), tuple(seconds), source))
    return out


def _read_network(reader, value):
    """Whether the cluster is emulated on this machine (``network: {emulate: true}``)."""
    reader.mapping(value, "network", NETWORK_KEYS)
    return reader.flag(value["emulate"], "network.emulate") if "emulate" in value else False


def _read_delay(reader, entry, field, emulated):
    if not isinstance(entry, dict) or "delay" not in entry:
        return 0.0
    if not emulated:
        reader.fail(f"{field}.delay", "only a node of an emulated cluster has a delay (network: {emulate: true})")
    if entry["delay"] in (0, "0"):
        return 0.0
    return reader.quantity(entry["delay"], f"{field}.delay", "latency")


def _emulated_nodes(reader, nodes, delays, seen):
    """The nodes as emulated here: one NIC each, with the emulated link's latency, and their core shares."""
    from autodist.resource_spec.emulated import emulate, emulated_link

    for k, node in enumerate(nodes):
        if len(node.nics) > 1:
            reader.fail(f"{seen[node.name]}.nics", f"an emulated node has one link, node {node.name!r} lists "
                                                   f"{len(node.nics)} NICs")
        node.nics = [emulated_link(nic.bandwidth * 8, delays[k]) for nic in node.nics]
    return emulate(nodes, delays)


def _read_node_group(reader, entry, field):
    reader.mapping(entry, field, NODE_KEYS)
    base = None
    if "preset" in entry:
        base = presets.machine(entry["preset"], field=f"{field}.preset", source=reader.source)
    if "name" in entry:
        name = reader.text(entry["name"], f"{field}.name")
    elif "address" in entry:
        name = reader.text(entry["address"], f"{field}.address")
    else:
        name = base.node_prefix if base else "node"
    if "/" in name:
        reader.fail(f"{field}.name", f"must not contain '/', got {name!r}")
    count = reader.count(entry["count"], f"{field}.count", presets.MAX_NODES) if "count" in entry else None
    names = presets.node_names(name, count) if count is not None else [name]
    addresses = _read_addresses(reader, entry, field, len(names))

    devices = _read_devices(reader, entry, field)
    fabric = _read_link(reader, entry["fabric"], f"{field}.fabric") if "fabric" in entry else None
    host_link = _read_link(reader, entry["host_link"], f"{field}.host_link") if "host_link" in entry else None
    bridge = _read_link(reader, entry["bridge"], f"{field}.bridge") if "bridge" in entry else None
    if bridge is not None and bridge.kind != "nvlink":
        reader.fail(f"{field}.bridge", f"a bridge joins GPUs by NVLink, not {bridge.kind}")
    nics = _read_nics(reader, entry["nics"], f"{field}.nics") if "nics" in entry else None
    labels = _read_labels(reader, entry.get("labels", {}), f"{field}.labels")

    group = []
    for node_name, address in zip(names, addresses):
        node = base.node(node_name, address) if base else NodeSpec(node_name, [], None, address=address)
        for kind, builders in devices.items():
            others = [d for d in node.devices if d.kind != kind]
            node.devices = others + [build(node_name) for build in builders]
        node.devices.sort(key=lambda d: (d.kind != "CPU", d.index))
        if not node.devices:
            reader.fail(field, "no devices: give gpus, cpus or a preset")
        if fabric is not None:
            node.fabric = fabric
        if host_link is not None:
            node.host_link = host_link
        if bridge is not None:
            node.bridge = bridge
        if nics is not None:
            node.nics = list(nics)
        if node.fabric is None:
            node.fabric = _default_fabric(node)
        node.labels = dict(labels)
        group.append(node)
    return group


def _read_addresses(reader, entry, field, count):
    if "addresses" in entry and "address" in entry:
        reader.fail(f"{field}.addresses", "give address or addresses, not both")
    if "addresses" in entry:
        addresses = entry["addresses"]
        if not isinstance(addresses, list) or len(addresses) != count:
            reader.fail(f"{field}.addresses", f"expected a list of {count} addresses, got {_show(addresses)}")
        return [reader.text(a, f"{field}.addresses[{i}]") for i, a in enumerate(addresses)]
    if "address" in entry:
        if count > 1:
            reader.fail(f"{field}.address", f"one address for {count} nodes; use addresses: [...]")
        return [reader.text(entry["address"], f"{field}.address")]
    return [""] * count


def _default_fabric(node):
    """The fabric of the node's GPU model, else PCIe Gen4 (a CPU-only host)."""
    for device in node.gpus():
        found = presets.find_device_model(device.model)
        if found and found[1].fabric:
            return presets.LINK_PRESETS[found[1].fabric]
    return presets.LINK_PRESETS["pcie-gen4"]


def _read_labels(reader, labels, field):
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        reader.fail(field, f"expected a mapping of strings, got {_show(labels)}")
    return {str(k): v for k, v in labels.items()}


def _read_devices(reader, entry, field):
    """Device kind -> builders (node name -> DeviceSpec), for the kinds the entry lists."""
    devices = {}
    for kind, key in (("CPU", "cpus"), ("GPU", "gpus")):
        if key not in entry:
            continue
        builders = devices[kind] = []
        for sub, group in reader.entries(entry[key], f"{field}.{key}"):
            template, count = _read_device_group(reader, group, sub, kind)
            builders += [_device_builder(template, len(builders) + i) for i in range(count)]
    return devices


def _device_builder(template, index):
    def build(node):
        return replace(template, name=f"{node}/{template.kind}:{index}", node=node, index=index,
                       peak_flops=dict(template.peak_flops))

    return build


def _read_device_group(reader, group, field, kind):
    reader.mapping(group, field, DEVICE_KEYS)
    count = reader.count(group["count"], f"{field}.count", MAX_PER_GROUP) if "count" in group else 1
    if "model" not in group:
        reader.fail(f"{field}.model", "missing; name a device model or describe one")
    model = reader.text(group["model"], f"{field}.model")
    explicit = all(k in group for k in ("peak_flops", "memory", "memory_bandwidth"))
    found = presets.find_device_model(model)
    if found is None and not explicit:
        presets.device_model(model, field=f"{field}.model", source=reader.source)
    if found is not None:
        name, known = found
        if known.kind != kind:
            reader.fail(f"{field}.model", f"{model!r} is a {known.kind}, not a {kind}")
        template = known.device(name, "", 0)
    else:
        template = DeviceSpec("", kind, model, {}, 0, 0.0)
    if "peak_flops" in group:
        template.peak_flops = _read_flops(reader, group["peak_flops"], f"{field}.peak_flops")
    if "memory" in group:
        value = group["memory"]
        template.memory_bytes = 0 if value == "unknown" else reader.memory(value, f"{field}.memory")
    if "memory_bandwidth" in group:
        value = group["memory_bandwidth"]
        template.memory_bandwidth = (
            0.0 if value == "unknown" else reader.quantity(value, f"{field}.memory_bandwidth", "bandwidth")
        )
    return template, count


def _read_flops(reader, value, field):
    """dtype -> FLOP/s; an empty mapping means unknown."""
    if not isinstance(value, dict):
        reader.fail(field, f"expected a mapping of dtype to FLOP/s, got {_show(value)}")
    return {str(dtype): reader.quantity(v, f"{field}.{dtype}", "flops") for dtype, v in value.items()}


def _read_nics(reader, value, field):
    if not isinstance(value, list):
        reader.fail(field, f"expected a list of NICs, got {_show(value)}")
    nics = []
    for i, entry in enumerate(value):
        sub = f"{field}[{i}]"
        count = 1
        if isinstance(entry, dict):
            reader.mapping(entry, sub, NIC_KEYS)
            if "count" in entry:
                count = reader.count(entry["count"], f"{sub}.count", MAX_PER_GROUP)
                entry = {k: v for k, v in entry.items() if k != "count"}
        nics += [_read_link(reader, entry, sub)] * count
    return nics


def _read_link(reader, value, field):
    """A :class:`LinkSpec` from a preset name or a mapping (see module doc)."""
    if isinstance(value, str):
        return presets.link_preset(value, field=field, source=reader.source)
    reader.mapping(value, field, LINK_KEYS)
    if "preset" in value:
        link = presets.link_preset(value["preset"], field=f"{field}.preset", source=reader.source)
    elif value.get("kind") == "pcie" and "generation" in value:
        generation = value["generation"]
        if generation not in PCIE_GENERATIONS:
            reader.fail(f"{field}.generation", f"expected one of {sorted(PCIE_GENERATIONS)}, got {_show(generation)}")
        link = presets.LINK_PRESETS[PCIE_GENERATIONS[generation]]
    else:
        link = _read_explicit_link(reader, value, field)
    if "kind" in value and "preset" in value and KIND_ALIASES.get(value["kind"], value["kind"]) != link.kind:
        reader.fail(f"{field}.kind", f"{value['kind']!r} contradicts preset {value['preset']!r} ({link.kind})")
    return _override_link(reader, link, value, field)


def _read_explicit_link(reader, value, field):
    if "kind" not in value:
        reader.fail(f"{field}.kind", f"missing; one of {', '.join(LINK_KINDS)} (or give a preset)")
    kind = KIND_ALIASES.get(value["kind"], value["kind"])
    if kind not in LINK_KINDS:
        reader.fail(f"{field}.kind", f"unknown link kind {_show(kind)}{_close(kind, LINK_KINDS)}")
    if "generation" in value:
        reader.fail(f"{field}.generation", "only a pcie link has a generation")
    if "bandwidth" in value and "speed" in value:
        reader.fail(f"{field}.speed", "give bandwidth or speed, not both")
    if "bandwidth" not in value and "speed" not in value:
        reader.fail(f"{field}.bandwidth", "missing; give bandwidth (GB/s) or speed (Gb/s)")
    return LinkSpec(kind, 1.0, DEFAULT_LATENCY[kind], rdma=kind in ("infiniband", "roce"))


def _override_link(reader, link, value, field):
    if "bandwidth" in value:
        link = replace(link, bandwidth=reader.quantity(value["bandwidth"], f"{field}.bandwidth", "bandwidth"))
    if "speed" in value:
        link = replace(link, bandwidth=reader.quantity(value["speed"], f"{field}.speed", "speed"))
    if "latency" in value:
        link = replace(link, latency=reader.quantity(value["latency"], f"{field}.latency", "latency"))
    for flag in ("rdma", "gpudirect", "via_cpu"):
        if flag in value:
            link = replace(link, **{flag: reader.flag(value[flag], f"{field}.{flag}")})
    if link.gpudirect and not link.rdma:
        reader.fail(f"{field}.gpudirect", "GPUDirect RDMA needs rdma: true")
    if link.via_cpu and link.kind != "pcie":
        reader.fail(f"{field}.via_cpu", f"only a pcie link joins GPUs through the CPU, not {link.kind}")
    return link


def _close(word, choices):
    close = difflib.get_close_matches(str(word), choices, n=1, cutoff=0.5)
    return f" (did you mean {close[0]!r}?)" if close else ""


# -- writing ---------------------------------------------------------------


def dump_cluster(spec):
    """cluster.yaml text that :func:`parse_cluster` reads back to an equal spec."""
    return yaml.dump(cluster_to_dict(spec), Dumper=SAFE_DUMPER, sort_keys=False, default_flow_style=None, width=100)


def cluster_to_dict(spec):
    """The cluster document of ``spec``: figures explicit with units; runs of
    identical nodes named ``<prefix>-0, <prefix>-1, ...`` become one entry with a count."""
    network = {"network": {"emulate": True}} if spec.emulated else {}
    collectives = [{"op": c.op, "nodes": c.nodes, "ranks_per_node": c.ranks_per_node,
                    **({"source": c.source} if c.source else {}),
                    "points": [[size, _format(seconds, "latency")]
                               for size, seconds in zip(c.sizes, c.seconds)]}
                   for c in spec.collectives]
    return {"name": spec.name, **network, "nodes": [_group_entry(run) for run in _node_runs(spec.nodes)],
            **({"collectives": collectives} if collectives else {})}


def _node_runs(nodes):
    """Runs of consecutive nodes that one ``{name: prefix, count: n}`` entry reproduces."""
    runs = []
    for node in nodes:
        body = _node_to_dict(node)
        prefix, _, index = node.name.rpartition("-")
        if runs:
            run = runs[-1]
            if (prefix and run["prefix"] == prefix and index == str(len(run["nodes"]))
                    and run["body"] == body and bool(run["nodes"][0].address) == bool(node.address)):
                run["nodes"].append(node)
                continue
        runs.append({"prefix": prefix if index == "0" else "", "body": body, "nodes": [node]})
    return runs


def _group_entry(run):
    nodes = run["nodes"]
    if len(nodes) == 1:
        head = {"name": nodes[0].name, "address": nodes[0].address}
    else:
        head = {"name": run["prefix"], "count": len(nodes), "addresses": [n.address for n in nodes]}
    head = {k: v for k, v in head.items() if v and v != [""] * len(nodes)}
    return {**head, **run["body"]}


def _node_to_dict(node):
    """A node's figures (without its name and address)."""
    out = {}
    for kind, key in (("CPU", "cpus"), ("GPU", "gpus")):
        groups = _group([_device_to_dict(d) for d in node.devices if d.kind == kind])
        if groups:
            out[key] = groups
    out["fabric"] = _link_to_dict(node.fabric)
    if node.host_link is not None:
        out["host_link"] = _link_to_dict(node.host_link)
    if node.bridge is not None:
        out["bridge"] = _link_to_dict(node.bridge)
    if node.nics:
        out["nics"] = _group([_link_to_dict(n) for n in node.nics])
    if node.labels:
        out["labels"] = dict(node.labels)
    if node.emulation is not None and node.emulation.delay:
        out["delay"] = _format(node.emulation.delay, "latency")
    return out


def _group(items):
    """Consecutive equal mappings as one with a ``count``."""
    groups = []
    for item in items:
        if groups and {k: v for k, v in groups[-1].items() if k != "count"} == item:
            groups[-1]["count"] += 1
        else:
            first, *rest = item.items()
            groups.append(dict([first, ("count", 1), *rest]))
    return groups


def _device_to_dict(device):
    return {
        "model": device.model,
        "peak_flops": {k: _format(v, "flops") for k, v in device.peak_flops.items()},
        "memory": _format_memory(device.memory_bytes) if device.memory_bytes else "unknown",
        "memory_bandwidth": _format(device.memory_bandwidth, "bandwidth") if device.memory_bandwidth else "unknown",
    }


def _link_to_dict(link):
    return {
        "kind": link.kind,
        "bandwidth": _format(link.bandwidth, "bandwidth"),
        "latency": _format(link.latency, "latency"),
        "rdma": link.rdma,
        "gpudirect": link.gpudirect,
        **({"via_cpu": True} if link.via_cpu else {}),
    }


def _format(value, quantity):
    """``"<number> <unit>"`` in the default unit when that reads back exactly, else the base unit."""
    units = UNITS[quantity]
    unit, scale = next(iter(units.items()))
    number = value / scale
    if float(repr(number)) * scale != value:
        unit, number = next(u for u, s in units.items() if s == 1), value
    return f"{_number(number)} {unit}"


def _format_memory(nbytes):
    for unit in ("GB", "GiB", "MiB"):
        if nbytes % UNITS["memory"][unit] == 0:
            return f"{nbytes // UNITS['memory'][unit]} {unit}"
    return f"{nbytes} B"


def _number(x):
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(float(x))
