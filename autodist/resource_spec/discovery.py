"""Discover the cluster: Kubernetes nodes, or this machine.

From Kubernetes (:func:`from_kubernetes`, through the official client; the
pure part is :func:`nodes_to_spec`) a node's

- GPUs are ``status.allocatable["nvidia.com/gpu"]`` (else the GPU feature
  discovery label ``nvidia.com/gpu.count``) of the model named by
  ``nvidia.com/gpu.product``; ``nvidia.com/gpu.memory`` (MiB) gives their
  memory.  An unknown product keeps that memory, says its FLOP/s are unknown,
  and warns (:class:`DiscoveryWarning`);
- RDMA is available when an ``rdma/*`` resource is allocatable or node feature
  discovery labels ``feature.node.kubernetes.io/rdma.available=true``;
- NICs are described by labels Kubernetes has no standard for:
  ``autodist.io/nic-kind`` (infiniband, roce, ethernet), ``autodist.io/nic-speed``
  (e.g. ``400Gb/s``; a bare number is Gb/s), ``autodist.io/nic-count`` and
  ``autodist.io/gpudirect=true``.  Without a speed label a node gets one
  10 Gb/s NIC and a warning.

Nodes that are cordoned or not Ready are left out with a warning.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import replace

from autodist.errors import InputError
from autodist.resource_spec import presets
from autodist.resource_spec.spec import DeviceSpec, LinkSpec, NodeSpec, ResourceSpec

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT = "nvidia.com/gpu.product"
GPU_COUNT = "nvidia.com/gpu.count"
GPU_MEMORY = "nvidia.com/gpu.memory"
RDMA_AVAILABLE = "feature.node.kubernetes.io/rdma.available"
RDMA_CAPABLE = "feature.node.kubernetes.io/rdma.capable"
NIC_KIND = "autodist.io/nic-kind"
NIC_SPEED = "autodist.io/nic-speed"
NIC_COUNT = "autodist.io/nic-count"
GPUDIRECT = "autodist.io/gpudirect"
KEPT_LABEL_PREFIXES = ("nvidia.com/gpu.", "feature.node.kubernetes.io/rdma", "autodist.io/",
                       "topology.kubernetes.io/", "kubernetes.io/hostname")
UNLABELLED_NIC = "eth-10g"
LATENCY_PRESET = {"infiniband": "ib-ndr", "roce": "roce-100g", "ethernet": UNLABELLED_NIC}
MIB = 2**20


class DiscoveryWarning(UserWarning):
    """Discovery had to guess or leave a figure unknown."""


def _warn(message):
    warnings.warn(message, DiscoveryWarning, stacklevel=3)


def from_kubernetes(label_selector=None, kubeconfig=None, timeout_s=10.0):
    """The cluster of the Kubernetes nodes (matching ``label_selector``).

    Uses ``kubeconfig`` (or the default kubeconfig), else the in-cluster
    service account.

    Raises
    ------
    InputError
        No configuration, an unreachable API server, or no matching node.
    """
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    try:
        config.load_kube_config(config_file=kubeconfig)
        where = kubeconfig or "kubeconfig"
    except (ConfigException, OSError, TypeError) as kube_exc:
        if kubeconfig:
            raise InputError(f"cannot load kubeconfig ({_one_line(kube_exc)})", source=kubeconfig) from None
        try:
            config.load_incluster_config()
            where = "in-cluster config"
        except ConfigException:
            raise InputError(
                "no Kubernetes configuration: no kubeconfig (~/.kube/config or $KUBECONFIG) "
                "and not running in a pod"
            ) from None
    api = client.CoreV1Api()
    try:
        response = api.list_node(
            label_selector=label_selector or "", _preload_content=False, _request_timeout=timeout_s
        )
    except client.ApiException as exc:
        raise InputError(f"Kubernetes API refused to list nodes ({exc.status} {exc.reason})", source=where) from None
    except Exception as exc:  # urllib3 wraps connection failures in several types
        raise InputError(f"cannot reach the Kubernetes API server ({_one_line(exc)})", source=where) from None
    try:
        items = json.loads(response.data).get("items") or []
    except (ValueError, AttributeError) as exc:
        raise InputError(f"unexpected answer to list nodes ({_one_line(exc)})", source=where) from None
    if not items:
        selector = f" matching {label_selector!r}" if label_selector else ""
        raise InputError(f"no nodes{selector}", source=where)
    return nodes_to_spec(items, name="kubernetes")


def _one_line(exc):
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def nodes_to_spec(nodes, name="kubernetes"):
    """The :class:`ResourceSpec` of Kubernetes Node objects (dicts, as the API's JSON).

    Parameters
    ----------
    nodes : list of dict
        ``items`` of a NodeList: ``metadata.name``/``labels``, ``status.allocatable``,
        ``status.capacity``, ``status.addresses``, ``status.conditions``.
    name : str
        The spec's name.
    """
    specs = []
    for i, node in enumerate(sorted(nodes, key=lambda n: _get(n, "metadata", "name") or "")):
        node_name = _get(node, "metadata", "name")
        if not node_name:
            raise InputError("node without metadata.name", field=f"items[{i}]")
        if not _schedulable(node):
            _warn(f"node {node_name}: cordoned or not Ready, left out")
            continue
        specs.append(_node_spec(node_name, node))
    if not specs:
        raise InputError("no schedulable Ready nodes", source=name)
    if len(specs) > 1:
        for spec in specs:
            if not spec.nics:
                raise InputError("no NIC to reach the other nodes", field=f"nodes.{spec.name}")
    return ResourceSpec(specs, name=name)


def _get(obj, *keys):
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _schedulable(node):
    if _get(node, "spec", "unschedulable"):
        return False
    conditions = _get(node, "status", "conditions") or []
    ready = [c for c in conditions if c.get("type") == "Ready"]
    return not ready or ready[0].get("status") == "True"


def _quantity(value, field):
    from kubernetes.utils.quantity import parse_quantity

    try:
        return parse_quantity(value)
    except (ValueError, TypeError):
        raise InputError(f"not a Kubernetes quantity: {value!r}", field=field) from None


def _node_spec(node_name, node):
    labels = _get(node, "metadata", "labels") or {}
    allocatable = _get(node, "status", "allocatable") or {}
    field = f"nodes.{node_name}"
    memory = allocatable.get("memory")
    cpu = DeviceSpec(
        name=f"{node_name}/CPU:0",
        kind="CPU",
        model="cpu",
        peak_flops={},
        memory_bytes=int(_quantity(memory, f"{field}.status.allocatable.memory")) if memory else 0,
        memory_bandwidth=0.0,
        node=node_name,
        index=0,
    )
    gpus, gpu_model = _gpus(node_name, labels, allocatable, field)
    fabric, host_link = _fabric(node_name, gpu_model, bool(gpus))
    address = next(
        (a.get("address", "") for a in _get(node, "status", "addresses") or [] if a.get("type") == "InternalIP"), ""
    )
    return NodeSpec(
        name=node_name,
        devices=[cpu] + gpus,
        fabric=fabric,
        nics=_nics(node_name, labels, allocatable, field),
        address=address,
        labels={k: v for k, v in sorted(labels.items()) if k.startswith(KEPT_LABEL_PREFIXES)},
        host_link=host_link,
    )


def _gpus(node_name, labels, allocatable, field):
    if GPU_RESOURCE in allocatable:
        count = int(_quantity(allocatable[GPU_RESOURCE], f"{field}.status.allocatable.{GPU_RESOURCE}"))
    elif GPU_COUNT in labels:
        count = int(_quantity(labels[GPU_COUNT], f"{field}.metadata.labels.{GPU_COUNT}"))
    else:
        count = 0
    if count == 0:
        return [], None
    product = labels.get(GPU_PRODUCT, "")
    memory = 0
    if GPU_MEMORY in labels:
        memory = int(_quantity(labels[GPU_MEMORY], f"{field}.metadata.labels.{GPU_MEMORY}")) * MIB
    found = presets.find_device_model(product) if product else None
    if found:
        model_name, model = found
        template = model.device(model_name, node_name, 0)
        if memory:
            template = replace(template, memory_bytes=memory)
    else:
        model_name, model = product or "unknown-gpu", None
        known = f"memory {memory // MIB} MiB from {GPU_MEMORY}" if memory else "memory unknown"
        _warn(
            f"node {node_name}: unknown GPU product {product or '(no ' + GPU_PRODUCT + ' label)'!r}; "
            f"peak FLOP/s and memory bandwidth unknown, {known}"
        )
        template = DeviceSpec("", "GPU", model_name, {}, memory, 0.0)
    gpus = [
        replace(template, name=f"{node_name}/GPU:{i}", node=node_name, index=i, peak_flops=dict(template.peak_flops))
        for i in range(count)
    ]
    return gpus, model


def _fabric(node_name, gpu_model, has_gpus):
    """In-node fabric and host link: the GPU model's, else PCIe Gen4 (assumed)."""
    pcie = presets.LINK_PRESETS["pcie-gen4"]
    if gpu_model is not None:
        host_link = presets.LINK_PRESETS[gpu_model.host_link] if gpu_model.host_link else None
        return presets.LINK_PRESETS[gpu_model.fabric], host_link
    if has_gpus:
        _warn(f"node {node_name}: GPU interconnect unknown, assuming PCIe Gen4")
    return pcie, None


def _nics(node_name, labels, allocatable, field):
    rdma = labels.get(RDMA_AVAILABLE) == "true" or any(
        k.startswith("rdma/") and _quantity(v, f"{field}.status.allocatable.{k}") > 0
        for k, v in allocatable.items()
    )
    if labels.get(RDMA_CAPABLE) == "true" and not rdma:
        _warn(f"node {node_name}: RDMA-capable but no rdma/* resource or {RDMA_AVAILABLE}; using TCP")
    kind = labels.get(NIC_KIND, "roce" if rdma else "ethernet")
    if kind not in LATENCY_PRESET:
        raise InputError(f"expected infiniband, roce or ethernet, got {kind!r}", field=f"{field}.labels.{NIC_KIND}")
    if NIC_SPEED in labels:
        bandwidth = _nic_bandwidth(labels[NIC_SPEED], f"{field}.labels.{NIC_SPEED}")
        latency = presets.LINK_PRESETS[LATENCY_PRESET[kind]].latency
    else:
        guess = presets.LINK_PRESETS[UNLABELLED_NIC]
        _warn(f"node {node_name}: no {NIC_SPEED} label, assuming one {guess.bandwidth * 8 / 1e9:g} Gb/s NIC")
        bandwidth, latency = guess.bandwidth, guess.latency
    count = int(_quantity(labels.get(NIC_COUNT, "1"), f"{field}.labels.{NIC_COUNT}"))
    if count < 1:
        raise InputError(f"must be at least 1, got {labels[NIC_COUNT]!r}", field=f"{field}.labels.{NIC_COUNT}")
    gpudirect = rdma and labels.get(GPUDIRECT) == "true"
    return [LinkSpec(kind, bandwidth, latency, rdma=rdma, gpudirect=gpudirect)] * count


def _nic_bandwidth(text, field):
    """Bytes/s from a speed label: ``400Gb/s``, ``100G``, ``25`` (Gb/s)."""
    number = text.strip().lower().removesuffix("/s").removesuffix("b").removesuffix("g")
    try:
        gbits = float(number)
    except ValueError:
        raise InputError(f"expected a speed like '100Gb/s', got {text!r}", field=field) from None
    if not gbits > 0 or gbits == float("inf"):
        raise InputError(f"must be positive, got {text!r}", field=field)
    return gbits * 1e9 / 8


def local_machine(detect_gpus=True):
    """This machine as one node ``local``: its CPUs, memory and (via TensorFlow) GPUs.

    TensorFlow is imported only when an NVIDIA driver is present
    (``/proc/driver/nvidia``).  The CPU's peak FLOP/s is an upper-bound
    estimate from /proc/cpuinfo; its memory bandwidth is unknown (a warning
    says so: the measured ``cpu-local`` preset has one).
    """
    cores = os.cpu_count() or 1
    peak = _cpu_peak_flops(cores)
    _warn("local CPU: memory bandwidth unknown (the cpu-local preset has measured figures)")
    cpu = DeviceSpec("local/CPU:0", "CPU", "cpu", peak, _meminfo_total(), 0.0, node="local", index=0)
    gpus = []
    if detect_gpus and os.path.exists("/proc/driver/nvidia"):
        gpus = _local_gpus()
        if not gpus:
            _warn("local: an NVIDIA driver is loaded but TensorFlow sees no GPU (tensorflow-cpu?)")
    if gpus:
        known = [presets.find_device_model(g.model) for g in gpus]
        same = all(k is not None and k[0] == known[0][0] for k in known)
        fabric, host_link = _fabric("local", known[0][1] if same else None, True)
    else:
        fabric, host_link = presets.LINK_PRESETS["loopback-local"], None
    node = NodeSpec("local", [cpu] + gpus, fabric, labels={"cpus": str(cores)}, host_link=host_link)
    return ResourceSpec([node], name="local")


def _cpu_peak_flops(cores):
    """{"float32": ..., "float64": ...}: logical CPUs x clock x FLOP per cycle, or {} if unreadable.

    FLOP per cycle per core, float32: 64 with AVX-512 (two FMA units), 32 with
    AVX2 and FMA, 8 otherwise (SSE); see presets for the arithmetic.
    """
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            info = fh.read()
    except OSError:
        return {}
    clocks = [float(line.split(":")[1]) for line in info.splitlines() if line.startswith("cpu MHz")]
    flag_lines = [line.split(":")[1].split() for line in info.splitlines() if line.startswith("flags")]
    if not clocks or not flag_lines:
        return {}
    flags = set(flag_lines[0])
    per_cycle = 64 if "avx512f" in flags else 32 if {"avx2", "fma"} <= flags else 8
    fp32 = cores * max(clocks) * 1e6 * per_cycle
    return {"float32": fp32, "float64": fp32 / 2}


def _meminfo_total():
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _local_gpus():
    import tensorflow as tf

    gpus = []
    for i, device in enumerate(tf.config.list_physical_devices("GPU")):
        product = tf.config.experimental.get_device_details(device).get("device_name", "")
        found = presets.find_device_model(product)
        if found:
            gpus.append(found[1].device(found[0], "local", i))
        else:
            _warn(f"local GPU {i}: unknown product {product!r}; peak FLOP/s, memory and bandwidth unknown")
            gpus.append(DeviceSpec(f"local/GPU:{i}", "GPU", product or "unknown-gpu", {}, 0, 0.0, "local", i))
    return gpus
