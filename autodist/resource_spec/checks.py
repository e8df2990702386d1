"""The invariants of a ResourceSpec read from JSON (a resource spec file, or a plan's ``cluster``).

A cluster.yaml is checked field by field as it is read (cluster_file.py);
a resource spec JSON holds the same nodes, devices and links in their final
form, and :func:`spec_problems` checks those: names unique and as the
devices' nodes, kinds and indices say; known device and link kinds;
positive, finite FLOP/s and link bandwidths; memory and memory bandwidth
that are 0 (unknown, as discovery leaves them) or positive; non-negative
latencies; an emulated cluster's every node emulated, on listed cores.
"""

from __future__ import annotations

import math

# The kinds of link and device a spec may hold (below spec.py, which reads them).
LINK_KINDS = ("nvlink", "pcie", "loopback", "infiniband", "roce", "ethernet")
DEVICE_KINDS = ("GPU", "CPU")


def _positive(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _known(value):
    """0 (unknown) or a positive finite number."""
    return _positive(value) or (value == 0 and not isinstance(value, bool))


def _link_problems(link, field):
    if link.kind not in LINK_KINDS:
        yield f"{field}.kind", f"unknown link kind {link.kind!r} (one of {', '.join(LINK_KINDS)})"
    if not _positive(link.bandwidth):
        yield f"{field}.bandwidth", f"must be a positive number of bytes/s, got {link.bandwidth!r:.60}"
    if not _known(link.latency):
        yield f"{field}.latency", f"must be a number of seconds >= 0, got {link.latency!r:.60}"
    for flag in ("rdma", "gpudirect", "via_cpu"):
        if not isinstance(getattr(link, flag), bool):
            yield f"{field}.{flag}", f"must be true or false, got {getattr(link, flag)!r:.60}"


def _device_problems(device, node, field):
    if device.kind not in DEVICE_KINDS:
        yield f"{field}.kind", f"unknown device kind {device.kind!r} (one of {', '.join(DEVICE_KINDS)})"
    elif isinstance(device.index, bool) or not isinstance(device.index, int) or device.index < 0:
        yield f"{field}.index", f"must be an integer >= 0, got {device.index!r:.60}"
    elif (device.node, device.name) != (node.name, f"{node.name}/{device.kind}:{device.index}"):
        yield f"{field}.name", f"{device.name!r} on node {device.node!r}, expected {node.name}/{device.kind}:{device.index}"
    if not isinstance(device.model, str):
        yield f"{field}.model", f"must be a string, got {device.model!r:.60}"
    flops = device.peak_flops
    if not isinstance(flops, dict) or not all(isinstance(k, str) and _positive(v) for k, v in flops.items()):
        yield f"{field}.peak_flops", f"must map dtype names to positive FLOP/s, got {flops!r:.60}"
    if not isinstance(device.memory_bytes, int) or not _known(device.memory_bytes):
        yield f"{field}.memory_bytes", f"must be a whole number of bytes >= 0 (0: unknown), got {device.memory_bytes!r:.60}"
    if not _known(device.memory_bandwidth):
        yield f"{field}.memory_bandwidth", f"must be a number of bytes/s >= 0 (0: unknown), got {device.memory_bandwidth!r:.60}"


def spec_problems(nodes):
    """``(field, message)`` for every broken invariant of a list of NodeSpec, first to last."""
    node_names, device_names = set(), set()
    for i, node in enumerate(nodes):
        field = f"nodes[{i}]"
        if not isinstance(node.name, str) or not node.name or node.name in node_names:
            yield f"{field}.name", f"must be a unique, non-empty string, got {node.name!r:.60}"
            continue
        node_names.add(node.name)
        if not isinstance(node.address, str) or not isinstance(node.labels, dict):
            yield field, "address must be a string and labels a mapping"
        if not isinstance(node.devices, list) or not node.devices:
            yield f"{field}.devices", "a node needs at least one device"
        for j, device in enumerate(node.devices):
            yield from _device_problems(device, node, f"{field}.devices[{j}]")
            if device.name in device_names:
                yield f"{field}.devices[{j}].name", f"duplicate device {device.name!r}"
            device_names.add(device.name)
        yield from _link_problems(node.fabric, f"{field}.fabric")
        if not isinstance(node.nics, list):
            yield f"{field}.nics", "must be a list of links"
            continue
        for k, nic in enumerate(node.nics):
            yield from _link_problems(nic, f"{field}.nics[{k}]")
        if node.host_link is not None:
            yield from _link_problems(node.host_link, f"{field}.host_link")
        if node.bridge is not None:
            yield from _link_problems(node.bridge, f"{field}.bridge")
        if node.emulation is not None:
            yield from _emulation_problems(node.emulation, f"{field}.emulation")
    if len({node.emulation is None for node in nodes}) > 1:
        yield "nodes", "either every node is emulated on this machine or none is"


def _emulation_problems(emulation, field):
    cores = emulation.cores
    if not isinstance(cores, list) or not cores or not all(
            isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in cores):
        yield f"{field}.cores", f"must be a non-empty list of CPU core numbers, got {cores!r:.60}"
    if not _known(emulation.delay):
        yield f"{field}.delay", f"must be a number of seconds >= 0, got {emulation.delay!r:.60}"
