"""Emulated clusters: N nodes on this machine, joined by shaped links.

``emu-100mbit:N``, ``emu-1gbit:N`` and ``emu-10gbit:N`` are N nodes of this
machine's CPU (``cpu-local``) whose one NIC is TCP over Ethernet at that
rate; a cluster file whose ``network`` says ``emulate: true`` emulates its
own nodes (see cluster_file.py).  ``autodist run`` builds them with network
namespaces and ``tc`` (launcher.emulation).

What a node computes: the machine's cores are split evenly among the nodes
(at least one each, round-robin when there are more nodes than cores) and
every task of a node is pinned to its cores.  A ``cpu-local`` CPU of an
emulated node keeps the figures of the machine its op costs were measured
on, and :meth:`ResourceSpec.cores_of` says how many of its cores the node
gets (the cost model runs the step on that many); it gets its node's share
of the memory.

What a link does: each node's link is shaped to its NIC's bandwidth in both
directions, so a transfer from node a to node b is limited by a's sending
and b's receiving rate, as the simulator queues it.  A node's ``delay`` is
added to each direction of its link, so a one-way path crosses two delays;
its NIC's latency is the veth's own plus the delay.
"""

from __future__ import annotations

import os
from dataclasses import replace

from autodist.resource_spec.presets import DEVICE_MODELS, LINK_PRESETS, node_names
from autodist.resource_spec.spec import EmulatedNode, LinkSpec, NodeSpec, ResourceSpec

# One-way latency of a veth pair through a bridge, as this machine's loopback (presets.LINK_PRESETS["loopback-local"]).
VETH_LATENCY = 5e-6
# Preset name -> link rate in bits per second.
EMULATED_RATES = {"emu-100mbit": 100e6, "emu-1gbit": 1e9, "emu-10gbit": 10e9}
NODE_PREFIX = "emu"


def machine_cores():
    """The CPU cores this process may run on, in order."""
    return sorted(os.sched_getaffinity(0))


def core_shares(count, cores=None):
    """Per node of ``count``: the cores it is pinned to (an even split, at least one core each)."""
    cores = machine_cores() if cores is None else list(cores)
    per_node = max(1, len(cores) // count)
    return [[cores[(i * per_node + j) % len(cores)] for j in range(per_node)] for i in range(count)]


def emulated_link(rate_bits, delay=0.0):
    """The NIC of an emulated node: TCP over Ethernet at ``rate_bits`` bit/s, veth latency plus ``delay``."""
    return LinkSpec("ethernet", rate_bits / 8, VETH_LATENCY + delay)


def emulate(nodes, delays=None, cores=None):
    """``nodes`` as emulated nodes of this machine: each with its core share and ``delays[i]`` seconds of delay.

    A ``cpu-local`` CPU gets its node's share of the machine's memory.
    """
    shares = core_shares(len(nodes), cores)
    delays = delays or [0.0] * len(nodes)
    out = []
    for node, share, delay in zip(nodes, shares, delays):
        devices = [_share_of(d, len(nodes)) for d in node.devices]
        out.append(replace(node, devices=devices, emulation=EmulatedNode(cores=share, delay=float(delay))))
    return out


def _share_of(device, nodes):
    """A ``cpu-local`` CPU with the whole machine's memory, with its node's share of it; any other device as it is.

    A memory a cluster file states (a written-out emulated cluster's, say)
    is taken as stated.
    """
    whole = DEVICE_MODELS["cpu-local"].memory_bytes
    if device.kind == "CPU" and device.model == "cpu-local" and device.memory_bytes == whole:
        return replace(device, peak_flops=dict(device.peak_flops), memory_bytes=whole // nodes)
    return device


def emulated_preset(name, count):
    """The :class:`ResourceSpec` of ``emu-<rate>:count`` (``name`` is a key of EMULATED_RATES)."""
    nodes = [NodeSpec(node, [DEVICE_MODELS["cpu-local"].device("cpu-local", node, 0)], LINK_PRESETS["loopback-local"],
                      nics=[emulated_link(EMULATED_RATES[name])])
             for node in node_names(NODE_PREFIX, count)]
    return ResourceSpec(emulate(nodes), name=f"{name}:{count}" if count > 1 else name)
