"""Communication model: point-to-point transfers, collectives and PS traffic.

Every operation is a list of :class:`~cost_models.types.Phase`; phases run one
after another and each occupies its link resources for its whole duration, so
the simulator can queue them per link to model contention.  Links are
full duplex: a transfer occupies the sending direction of its source's port
(``"<device>/fabric/tx"``, ``"<node>/nic<k>/tx"``) and the receiving direction
of its destination's (``.../rx``), so a push and a pull on one NIC do not
contend, while pushes from many workers into one server still queue on its
``rx``.  Formulas: ``../shared/reference/hardware.md`` ("Cost formulas in
common use").

Two transports, as the runtime uses them (README, "How a plan runs"):

- collective ops (NCCL on GPUs, TensorFlow's ring on CPUs) for plans that
  allreduce everything: :meth:`CommModel.allreduce_phases`;
- TensorFlow's gRPC between tasks for PS traffic and for the allreduced
  part of hybrid plans, which the runtime sums with ordinary ops
  (:meth:`CommModel.ps_phases`, :meth:`CommModel.graph_allreduce_phases`).
"""

from __future__ import annotations

import functools
import math

from cost_models.overlap import lockstep_pace
from cost_models.types import Phase
from autodist.errors import CostModelError, InputError
from autodist.resource_spec.spec import receive_link, send_link

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

ALGORITHMS = ("ring", "hierarchical", "master")
GRPC_MEDIA = frozenset({"loopback", "ethernet"})
# nccl-tests' collectives and their bus-bandwidth factor busbw / algbw for n
# ranks (nccl-tests doc/PERFORMANCE.md): S is the whole buffer (allgather's
# output, reducescatter's input).
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast")


def bus_factor(op, n):
    """busbw / algbw of collective ``op`` over ``n`` ranks, as nccl-tests reports it."""
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("allgather", "reducescatter"):
        return (n - 1) / n
    return 1.0


def gradient_bytes(variable):
    """Bytes one replica sends to synchronise ``variable`` (a VariableInfo).

    A sparse gradient moves only the touched rows (values plus int64 row
    indices) when ``rows_touched`` is known; anything else moves the whole
    variable.
    """
    if variable.sparse_gradient and variable.rows_touched is not None and variable.shape:
        rows = max(int(variable.shape[0]), 1)
        row_bytes = variable.bytes // rows
        return int(min(variable.rows_touched, rows) * (row_bytes + 8))
    return int(variable.bytes)


# Bytes per element of a gradient compressed on the wire (fp16 or bf16, Horovod's Compression.fp16).
COMPRESSED_ITEMSIZE = 2


def wire_bytes(variable, compression="none"):
    """Bytes of ``variable``'s dense gradient on the wire: its own dtype, or 2 bytes per element when compressed.

    A gradient already at 2 bytes or fewer per element is sent as it is.
    """
    if compression == "none":
        return int(variable.bytes)
    elements = math.prod(int(d) for d in variable.shape)
    return min(int(variable.bytes), elements * COMPRESSED_ITEMSIZE)


def cast_seconds(from_bytes, to_bytes, memory_bandwidth):
    """An elementwise cast on a device of ``memory_bandwidth`` (bytes/s): it streams its input and output once."""
    return (from_bytes + to_bytes) / memory_bandwidth


class CommModel:
    """Transfer and collective times on one cluster.

    Parameters
    ----------
    resource_spec : autodist.resource_spec.ResourceSpec
    calibration : cost_models.calibration.TransferCalibration or None
        Measured TensorFlow transfers over loopback gRPC.  Its fitted
        overhead is TensorFlow's fixed cost per transferred tensor or
        collective launch on every path; transfers over a ``loopback`` fabric
        take its measured curve.  Without one, only link latencies count.
    collectives : cost_models.calibration.TransferCalibration or None
        Measured TensorFlow CPU ring allreduces between two processes over
        loopback (:mod:`cost_models.collectives`).  An allreduce that runs on
        collective ops (``collective_ops=True``) around a ring of loopback
        hops takes this curve: TensorFlow's CPU collectives are much slower
        than its point-to-point transfers.
    efficiency : dict or None
        Achieved fractions of line rate that replace ``LINK_EFFICIENCY``'s
        (by link kind, RDMA over Ethernet as ``"roce"``) or
        ``NVLS_EFFICIENCY`` (as ``"nvls"``), e.g. while fitting them.
    remote_step : cost_models.remote_step.RemoteStepCalibration or None
        The measured fixed cost of a step one client drives on remote tasks;
        without one, that cost is not counted.
    emulated_link : cost_models.emulated_link.EmulatedLinkCalibration or None
        What TensorFlow achieves over this machine's emulated links: the NIC
        of an emulated node runs at the fraction measured for its rate, and
        a collective between emulated nodes takes the allreduce measured on
        their links; without it, neither can be priced.
    overlap : cost_models.overlap.NcclOverlap or None
        The fitted fixed cost per collective and compute contention of a
        training step's NCCL collectives on GPUs (:meth:`compute_contention`);
        without it neither is counted, as nccl-tests sees a collective.
    """

    def __init__(self, resource_spec, calibration=None, collectives=None, efficiency=None, remote_step=None,
                 emulated_link=None, overlap=None):
        self.resource_spec = resource_spec
        self.remote_step = remote_step
        self.emulated_link = emulated_link
        self.overlap = overlap
        self._on_gpus = {}  # devices of a collective -> whether all are GPUs
        self.calibration = calibration
        self.collectives = collectives
        self.per_tensor_overhead = calibration.overhead if calibration is not None else 0.0
        self.efficiency = {**LINK_EFFICIENCY, "nvls": NVLS_EFFICIENCY, **(efficiency or {})}

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

    def client_step_seconds(self, tasks):
        """The fixed cost of one step that a client drives on ``tasks`` remote tasks (its dispatch and wait)."""
        return self.remote_step.seconds(tasks) if self.remote_step is not None else 0.0

    def replica_loop_seconds(self, loop):
        """The fixed cost of one step that each replica's own ``loop`` (``"fit"``, ``"function"``, ``""``) drives."""
        return self.remote_step.replica_loop_seconds(loop) if self.remote_step is not None else 0.0

    def client_cpu_seconds(self, tasks):
        """CPU seconds per step of the client process that drives ``tasks`` remote tasks, and of each task's
        process for its part: ``(client, per task)``, measured (0 without the measurement)."""
        if self.remote_step is None:
            return 0.0, 0.0
        return self.remote_step.client_cpu_seconds(tasks), self.remote_step.task_cpu

    def endpoint_cpu_seconds(self, nbytes):
        """CPU seconds one endpoint's process spends sending or receiving one tensor of ``nbytes`` over gRPC
        inside a step, measured (0 without the measurement)."""
        return self.remote_step.endpoint_cpu_seconds(nbytes) if self.remote_step is not None else 0.0

    # -- links ---------------------------------------------------------------
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

    # -- point to point ------------------------------------------------------
    def grpc_path(self, src, dst):
        """(bandwidth, latency, links) of TensorFlow's gRPC from ``src`` to ``dst`` (another task).

        Across nodes the NIC runs TCP (``TCP_EFFICIENCY`` of its line rate,
        RDMA or not; an emulated node's, its measured fraction); every
        transfer is held to ``GRPC_BANDWIDTH``.  Loopback
        keeps its calibrated achieved bandwidth.
        """
        path = self.resource_spec.path(src, dst)
        bandwidth, latency, links = self.effective_path(src, dst)
        if path.medium == "loopback" or not links:
            return bandwidth, latency, links
        if path.kind == "inter-node" and not self._between_emulated_nodes(src, dst, path):
            bandwidth = path.bandwidth * TCP_EFFICIENCY
        return min(bandwidth, GRPC_BANDWIDTH), latency, links

    def transfer_phases(self, src_device, dst_device, nbytes, grpc=False):
        """One tensor of ``nbytes`` from ``src_device`` to ``dst_device``.

        latency + TensorFlow per-tensor overhead + bytes / achieved bandwidth;
        no phase at all on the same device.  ``grpc``: the tensor goes
        between tasks over TensorFlow's gRPC (:meth:`grpc_path`).
        """
        nbytes = _check_bytes(nbytes)
        route = self.grpc_path if grpc else self.effective_path
        bandwidth, latency, links = route(src_device, dst_device)
        if not links:
            return []
        return [self._phase(nbytes, bandwidth, latency, links,
                            self.resource_spec.path(src_device, dst_device).medium == "loopback")]

    def _phase(self, nbytes, bandwidth, latency, links, loopback):
        """latency + per-tensor overhead + bytes / bandwidth on ``links``; over ``loopback``, at least the
        calibrated loopback transfer."""
        seconds = latency + self.per_tensor_overhead + nbytes / bandwidth
        if self.calibration is not None and loopback:
            seconds = max(seconds, latency + float(self.calibration.predict(nbytes)))
        return Phase(seconds, links)

    def ps_phases(self, worker_device, ps_device, nbytes):
        """One push (or one pull) of ``nbytes`` between a worker and a PS, over gRPC.

        Fan-in contention is not in the number: every worker's push occupies
        the receiving direction of the server's NIC (or fabric port), so the
        simulator's queue on that link serialises them.  A PS on the worker's
        own device is still another task: see :meth:`_to_task_on_device`.
        """
        if worker_device == ps_device:
            return self._to_task_on_device(worker_device, nbytes)
        return self.transfer_phases(worker_device, ps_device, nbytes, grpc=True)

    def _to_task_on_device(self, device, nbytes):
        """A tensor between two tasks that share ``device`` (a worker and the PS task on its node's CPU).

        They are two processes: the runtime's PS job serves its variables
        from its own process, so every push and pull goes through gRPC over
        the node's loopback, as between two devices of the node.  Both
        directions of the device's port are held: on one CPU the sending and
        the receiving process copy and (de)serialise on the same cores.
        """
        spec = self.resource_spec
        port = spec.node_of(device).port_of(spec.device(device))
        links = (send_link(f"{device}/fabric"), receive_link(f"{device}/fabric"))
        bandwidth = port.bandwidth * self.link_efficiency(port.kind)
        return [self._phase(nbytes, bandwidth, port.latency, links, port.kind == "loopback")]

    # -- collectives ---------------------------------------------------------
    def allreduce_phases(self, nbytes, devices, algorithm="ring", collective_ops=False, horovod=False):
        """Phases of one allreduce of ``nbytes`` over ``devices``.

        A fused bucket is one allreduce of the bucket's summed bytes, so it
        pays the per-collective latency terms once instead of once per tensor.
        ``collective_ops``: the runtime sums it with TensorFlow's collective
        ops (plans that allreduce everything) rather than with transfers
        between the replicas' devices.  On GPUs those are NCCL's, with no
        gRPC overhead.  A collective op runs its own algorithm whatever
        ``algorithm`` names (``CollectiveReduceV2``: a ring on CPUs, NCCL's
        ring, tree or NVLS on GPUs), so it is priced as that.  ``horovod``: the collective is one of Horovod's fused
        buckets, which pays the fixed cost per collective fitted on the
        published Horovod runs (``overlap``: its coordination between ranks);
        TensorFlow's collective ops, which autodist's runtime runs, and
        nccl-tests do not.  Collective ops between this machine's processes
        cost what ``profile collectives`` measured over loopback; between
        emulated nodes, what ``profile emulated-links`` measured on their
        links (:meth:`_emulated_ring`).
        """
        nbytes = _check_bytes(nbytes)
        devices = list(dict.fromkeys(devices))
        if algorithm not in ALGORITHMS:
            raise InputError(f"unknown allreduce algorithm {algorithm!r} (expected one of {ALGORITHMS})")
        if collective_ops:
            algorithm = "ring"
        if len(devices) < 2:
            return []
        if collective_ops and self._ring_across_emulated_nodes(devices):
            return [self._emulated_ring(nbytes, devices)]
        on_this_machine = self._loopback_collective(nbytes, devices) if collective_ops else None
        if on_this_machine is not None and self._all_loopback(devices):
            _, _, links = self._ring_links(devices)
            return [Phase(on_this_machine, links)]
        groups = self._by_node(devices)
        if collective_ops and len(groups) == 1 and self._has_nvls(devices):
            ring, nvls = self._ring(nbytes, devices), self._nvls(nbytes, devices)
            phases = ring if sum(p.seconds for p in ring) <= nvls.seconds else [nvls]
        elif algorithm == "ring" or len(groups) == 1:
            phases = self._ring(nbytes, devices)
            if collective_ops and len(groups) > 1 and self._all_gpus(devices):
                # NCCL takes its tree where that is faster: small messages (TensorFlow's CPU collectives: a ring)
                tree = self._tree(nbytes, devices, groups)
                if sum(p.seconds for p in tree) < sum(p.seconds for p in phases):
                    phases = tree
        elif algorithm == "hierarchical":
            phases = self._hierarchical(nbytes, groups)
        else:
            phases = self._master(nbytes, groups)
        fixed = self.per_tensor_overhead if self._uses_grpc(devices) else 0.0
        if self.compute_contention(devices, collective_ops) is not None:
            fixed = self.overlap.collective_seconds if horovod else 0.0
        if fixed:
            phases[0] = Phase(phases[0].seconds + fixed, phases[0].links)
        return [p for p in phases if p.seconds > 0 or p.links]

    def _ring_across_emulated_nodes(self, devices):
        """Whether every hop of the ring over ``devices`` goes between two emulated nodes."""
        spec = self.resource_spec
        return all(self._between_emulated_nodes(a, b, spec.path(a, b)) for a, b in _hops(devices))

    def _emulated_ring(self, nbytes, devices):
        """TensorFlow's collective ring allreduce of ``nbytes`` between emulated nodes, as measured on their links
        (cost_models.collectives.ring_allreduce_seconds over the 2-task allreduce measured at the ring's slowest
        rate), plus its largest hop delay per step."""
        from cost_models.collectives import ring_allreduce_seconds

        paths = [self.resource_spec.path(a, b) for a, b in _hops(devices)]
        rate, n = min(p.bandwidth for p in paths), len(devices)
        measured = functools.partial(self._emulated(devices[0]).allreduce_seconds, rate)
        _, _, links = self._ring_links(devices)
        return Phase(ring_allreduce_seconds(measured, nbytes, n) + 2 * (n - 1) * max(p.latency for p in paths), links)

    def sparse_allgather_phases(self, nbytes, devices):
        """Phases of one sparse gradient's all-gather, ``nbytes`` of rows per replica.

        As launcher.runtime.collective runs it: the replicas' row counts are
        summed (a tiny allreduce), then the indices and the values are
        gathered, each a ring all-gather of every replica's part,
        ``(n-1)/n * S/B + (n-1) a`` over the whole ``S = n * nbytes``
        (hardware.md, "Cost formulas in common use"); each collective pays
        the per-tensor overhead where it runs over gRPC.  The one-client
        runtime copies every replica's rows to every other replica instead:
        the same bytes through each device's link.
        """
        nbytes = _check_bytes(nbytes)
        devices = list(dict.fromkeys(devices))
        n = len(devices)
        if n < 2:
            return []
        counts = self.allreduce_phases(8 * n, devices, "ring", collective_ops=True)
        bandwidth, latency, links = self._ring_links(devices)
        fixed = 2 * self.per_tensor_overhead if self._uses_grpc(devices) else 0.0
        gather = (n - 1) * nbytes / bandwidth + 2 * (n - 1) * latency + fixed
        return counts + [Phase(gather, links)]

    def compute_contention(self, devices, collective_ops=True, nbytes=None, seconds=None):
        """The fraction of its time beside compute that a training allreduce over ``devices`` takes from it.

        The fitted NCCL contention for collective ops on GPUs (``overlap``).
        Between CPU processes of this machine (loopback, or emulated nodes,
        which have only their own cores), a collective op's copies, sums and
        gRPC work run on the cores the replica computes on: given its
        ``nbytes`` and the ``seconds`` it is priced at, it takes the share
        that the same collective measured over loopback (where the CPU, not
        a link, binds) is of those seconds.  ``None`` for anything else
        (and without the measurements), which takes nothing from compute.
        """
        if not collective_ops:
            return None
        key = tuple(devices)
        if key not in self._on_gpus:
            self._on_gpus[key] = self._all_gpus(key)
        if self._on_gpus[key]:
            return None if self.overlap is None else self.overlap.contention
        if nbytes is None or not seconds or not (self._all_loopback(list(key)) or self._all_emulated(key)):
            return None
        on_this_machine = self._loopback_collective(nbytes, key)
        return None if on_this_machine is None else min(1.0, on_this_machine / seconds)

    def lockstep_pace(self, replicas):
        """How much longer ``replicas`` (lists of device names) that step together compute than one of them alone.

        The expected slowest of that many GPUs (cost_models.overlap.lockstep_pace, with the fitted speed spread
        of ``overlap``); 1 for a single replica, for replicas that are not all on GPUs and without ``overlap``.
        """
        if self.overlap is None or len(replicas) < 2 or not self._all_gpus([d for r in replicas for d in r]):
            return 1.0
        return lockstep_pace(len(replicas), self.overlap.speed_spread)

    def allreduce_time(self, nbytes, devices, algorithm="ring"):
        """Uncontended allreduce time: the sum of its phases."""
        return sum(p.seconds for p in self.allreduce_phases(nbytes, devices, algorithm))

    def bus_bandwidth(self, nbytes, devices, algorithm="ring"):
        """nccl-tests bus bandwidth of the predicted allreduce, bytes/s.

        busbw = algbw * 2(n-1)/n with algbw = nbytes / time.
        """
        n = len(devices)
        return nbytes / self.allreduce_time(nbytes, devices, algorithm) * 2 * (n - 1) / n

    def collective_phases(self, op, nbytes, devices):
        """Phases of one nccl-tests collective ``op`` of ``nbytes`` over ``devices``, as NCCL runs it.

        allreduce: :meth:`allreduce_phases` on collective ops (a ring, or
        NVLS where faster); the others as one ring: allgather / reducescatter
        ``(n-1)/n * S/B + (n-1) a``, broadcast pipelined down the ring,
        ``S/B + (n-1) a`` (hardware.md, "Cost formulas in common use").
        """
        nbytes = _check_bytes(nbytes)
        if op not in COLLECTIVES:
            raise InputError(f"unknown collective {op!r} (expected one of {', '.join(COLLECTIVES)})", field="--op")
        devices = list(dict.fromkeys(devices))
        if len(devices) < 2:
            raise InputError(f"a collective needs at least two devices, got {len(devices)}", field="--devices")
        for name in devices:
            self.resource_spec.device(name)
        if op == "allreduce":
            return self.allreduce_phases(nbytes, devices, "ring", collective_ops=True)
        n = len(devices)
        bandwidth, latency, links = self._ring_links(devices)
        volume = nbytes if op == "broadcast" else (n - 1) / n * nbytes
        return [Phase(volume / bandwidth + (n - 1) * latency, links)]

    # -- allreduce as the one-client runtime runs it -----------------------
    def graph_allreduce_phases(self, nbytes, devices, algorithm="ring"):
        """Phases of one allreduce summed by ordinary TensorFlow ops (launcher.runtime.allreduce).

        Hybrid plans run this way: every chunk is a tensor moved by
        TensorFlow, over gRPC between nodes (:meth:`grpc_path`) and as a
        device copy inside one.  ``ring``: ``2(n-1)`` steps of ``S/n``, each
        as long as its slowest hop; ``master``: every replica's tensor into
        the first device, then back out; ``hierarchical``: that inside each
        node onto its first device, a ring among those, a copy back inside.
        A fan-in's transfers pay TensorFlow's per-tensor overhead once and
        their bytes one after another.
        """
        nbytes = _check_bytes(nbytes)
        if algorithm not in ALGORITHMS:
            raise InputError(f"unknown allreduce algorithm {algorithm!r} (expected one of {ALGORITHMS})")
        devices = list(dict.fromkeys(devices))
        if len(devices) < 2:
            return []
        if algorithm == "ring":
            return self._graph_ring(nbytes, devices)
        if algorithm == "master":
            return [self._fan(devices[0], devices[1:], nbytes, inward=True),
                    self._fan(devices[0], devices[1:], nbytes, inward=False)]
        groups = self._by_node(devices)
        inward = [self._fan(g[0], g[1:], nbytes, inward=True) for g in groups if len(g) > 1]
        outward = [self._fan(g[0], g[1:], nbytes, inward=False) for g in groups if len(g) > 1]
        ring = self._graph_ring(nbytes, [g[0] for g in groups]) if len(groups) > 1 else []
        return [p for p in (_slowest(inward), *ring, _slowest(outward)) if p is not None]

    def graph_allreduce_messages(self, nbytes, devices, algorithm="ring"):
        """The gRPC tensors of :meth:`graph_allreduce_phases`' allreduce: ``(src, dst, bytes, count)`` per pair
        of devices on different nodes (a copy inside a node stays in its task's process)."""
        devices = list(dict.fromkeys(devices))
        n = len(devices)
        if n < 2:
            return []
        if algorithm == "ring":
            messages = [(a, b, nbytes / n, 2 * (n - 1)) for a, b in _hops(devices)]
        elif algorithm == "master":
            messages = [m for other in devices[1:] for m in ((other, devices[0], nbytes, 1),
                                                             (devices[0], other, nbytes, 1))]
        else:
            leaders = [g[0] for g in self._by_node(devices)]
            messages = self.graph_allreduce_messages(nbytes, leaders) if len(leaders) > 1 else []
        spec = self.resource_spec
        return [m for m in messages if spec.device(m[0]).node != spec.device(m[1]).node]

    def _graph_hop(self, src, dst, nbytes):
        """One tensor between two replica devices: gRPC across nodes, a device copy inside one."""
        across = self.resource_spec.path(src, dst).kind == "inter-node"
        return self.transfer_phases(src, dst, nbytes, grpc=across)

    def _graph_ring(self, nbytes, devices):
        n = len(devices)
        step, links = 0.0, set()
        for a, b in _hops(devices):
            for phase in self._graph_hop(a, b, nbytes / n):
                step = max(step, phase.seconds)
                links.update(phase.links)
        half = Phase((n - 1) * step, tuple(sorted(links)))
        return [half, half]

    def _fan(self, hub, others, nbytes, inward):
        """Every device of ``others`` sends ``nbytes`` to ``hub`` (``inward``), or ``hub`` to each of them."""
        seconds, links = 0.0, set()
        for other in others:
            for phase in self._graph_hop(other, hub, nbytes) if inward else self._graph_hop(hub, other, nbytes):
                seconds += phase.seconds
                links.update(phase.links)
        seconds -= self.per_tensor_overhead * max(len(others) - 1, 0)
        return Phase(seconds, tuple(sorted(links)))

    def _uses_grpc(self, devices):
        """Whether a collective over ``devices`` crosses a link TensorFlow
        drives through gRPC (loopback, TCP Ethernet) and so pays the calibrated
        per-tensor overhead; NCCL over NVLink/PCIe/RDMA pays link latencies only."""
        spec = self.resource_spec
        media = {spec.path(a, b).medium for a, b in _hops(devices)}
        return bool(media & GRPC_MEDIA)

    def _loopback_collective(self, nbytes, devices):
        """Seconds of TensorFlow's collective allreduce of ``nbytes`` between ``devices``' processes over this
        machine's loopback, as measured (cost_models.collectives); None without that measurement."""
        if self.collectives is None:
            return None
        from cost_models.collectives import ring_allreduce_seconds

        return ring_allreduce_seconds(self.collectives.predict, nbytes, len(devices))

    def _all_emulated(self, devices):
        """Whether every one of ``devices`` is on an emulated node (a process group of this machine)."""
        spec = self.resource_spec
        return all(spec.node_of(d).emulation is not None for d in devices)

    def _all_loopback(self, devices):
        spec = self.resource_spec
        return all(spec.path(a, b).medium == "loopback" for a, b in _hops(devices))

    def _by_node(self, devices):
        groups = {}
        for name in devices:
            groups.setdefault(self.resource_spec.device(name).node, []).append(name)
        return list(groups.values())

    def _ring_links(self, devices):
        """Slowest achieved bandwidth, largest latency and all links of a ring.

        NCCL runs one ring per NIC (multi-rail): where the ring crosses from
        one node to the next, it crosses on every NIC its devices on those
        nodes send through, so that hop carries their summed bandwidth.
        """
        spec = self.resource_spec
        rails = {}
        for name in devices:
            device = spec.device(name)
            node = spec.node(device.node)
            if node.nics:
                rails.setdefault(node.name, set()).add(node.nic_for(device))
        bandwidth, latency, links = float("inf"), 0.0, set()
        for a, b in _hops(devices):
            bw, lat, ls = self.effective_path(a, b)
            node_a, node_b = spec.device(a).node, spec.device(b).node
            if node_a != node_b:
                bw *= min(len(rails[node_a]), len(rails[node_b]))
                ls = ([send_link(f"{node_a}/nic{k}") for k in sorted(rails[node_a])]
                      + [receive_link(f"{node_b}/nic{k}") for k in sorted(rails[node_b])])
            bandwidth, latency = min(bandwidth, bw), max(latency, lat)
            links.update(ls)
        return bandwidth, latency, tuple(sorted(links))

    def _ring(self, nbytes, devices):
        # reduce-scatter then all-gather: each (n-1)/n * S/B + (n-1) a.
        n = len(devices)
        bandwidth, latency, links = self._ring_links(devices)
        half = (n - 1) / n * nbytes / bandwidth + (n - 1) * latency
        return [Phase(half, links), Phase(half, links)]

    def _tree(self, nbytes, devices, groups):
        """NCCL's tree allreduce over several nodes: a chain through each node's GPUs and a binary tree
        between the nodes; a pipelined reduce up it, then a pipelined broadcast down, each
        ``S/B + (ceil(log2 N) + G - 1) a`` on the ring's links (``B``, ``a``: the ring's slowest achieved
        bandwidth and largest hop latency; ``N`` nodes of at most ``G`` GPUs).  Its latency grows with the
        depth of the tree, not the number of GPUs, and its bandwidth term is the ring's times ``n/(n-1)``:
        faster than the ring for small messages, slower for large ones (NCCL's choice between them)."""
        bandwidth, latency, links = self._ring_links(devices)
        depth = (len(groups) - 1).bit_length() + max(len(g) for g in groups) - 1
        half = nbytes / bandwidth + depth * latency
        return [Phase(half, links), Phase(half, links)]

    def _all_gpus(self, devices):
        return all(self.resource_spec.device(d).kind == "GPU" for d in devices)

    def _has_nvls(self, devices):
        """Whether ``devices`` (of one node) are Hopper GPUs on an NVLink switch, where NCCL offers NVLS."""
        from cost_models.gpu import architecture_of

        spec = self.resource_spec
        node = spec.node_of(devices[0])
        return node.fabric.kind == "nvlink" and all(
            spec.device(d).kind == "GPU" and architecture_of(spec.device(d).model) in NVLS_ARCHITECTURES
            for d in devices)

    def _nvls(self, nbytes, devices):
        """One NVLS allreduce inside a node: every GPU sends and receives ``nbytes`` once through the switch."""
        node = self.resource_spec.node_of(devices[0])
        links = sorted(link for d in devices for link in (send_link(f"{d}/fabric"), receive_link(f"{d}/fabric")))
        return Phase(nbytes / (node.fabric.bandwidth * self.efficiency["nvls"]) + 2 * node.fabric.latency,
                     tuple(links))

    def _hierarchical(self, nbytes, groups):
        # reduce-scatter inside each node, allreduce of each GPU's 1/G share
        # between nodes over its NIC share, all-gather inside each node.
        g = max(len(group) for group in groups)
        intra = self._intra_phase(nbytes, groups, scatter=True)
        inter = self._inter_node_allreduce(nbytes / g, groups)
        return [intra, inter, intra]

    def _master(self, nbytes, groups):
        # reduce to the first device of each node, allreduce among those
        # masters over their NICs, broadcast inside each node.
        intra = self._intra_phase(nbytes, groups, scatter=False)
        inter = self._inter_node_allreduce(nbytes, [[group[0]] for group in groups])
        return [intra, inter, intra]

    def _intra_phase(self, nbytes, groups, scatter):
        """Reduce-scatter / all-gather (``scatter``) or pipelined reduce /
        broadcast inside every node at once; the slowest node sets the time."""
        seconds, links = 0.0, set()
        for group in groups:
            n = len(group)
            if n < 2:
                continue
            bandwidth, latency, ls = self._ring_links(group)
            volume = (n - 1) / n * nbytes if scatter else nbytes
            seconds = max(seconds, volume / bandwidth + (n - 1) * latency)
            links.update(ls)
        return Phase(seconds, tuple(sorted(links)))

    def _inter_node_allreduce(self, share, groups):
        """Ring allreduce of ``share`` bytes among the nodes, every device of a
        group running its own ring over its NIC (NIC bandwidth split among the
        group's devices that share it)."""
        spec = self.resource_spec
        n = len(groups)
        bandwidth, latency, links = float("inf"), 0.0, set()
        for group in groups:
            node = spec.node_of(group[0])
            users = {}
            for name in group:
                users.setdefault(node.nic_for(spec.device(name)), []).append(name)
            for k, names in users.items():
                nic = node.nics[k]
                share_bw = nic.bandwidth * self.nic_efficiency(node, nic) / len(names)
                bandwidth = min(bandwidth, share_bw)
                latency = max(latency, 2 * nic.latency)
                links.update((send_link(f"{node.name}/nic{k}"), receive_link(f"{node.name}/nic{k}")))
        seconds = 2 * (n - 1) / n * share / bandwidth + 2 * (n - 1) * latency
        return Phase(seconds, tuple(sorted(links)))


def link_busy(phase_lists):
    """Seconds each link is busy when all ``phase_lists`` run (contention bound).

    With queues on links, no schedule finishes before the busiest link
    has carried all its phases; ``max(link_busy(...).values())`` bounds, for
    example, a PS fan-in round from below.
    """
    busy = {}
    for phases in phase_lists:
        for phase in phases:
            for link in phase.links:
                busy[link] = busy.get(link, 0.0) + phase.seconds
    return busy


def _slowest(phases):
    """One phase as long as the longest of ``phases``, on all their links (None if there are none)."""
    if not phases:
        return None
    links = sorted({link for p in phases for link in p.links})
    return Phase(max(p.seconds for p in phases), tuple(links))


def _check_bytes(nbytes):
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or nbytes < 0:
        raise InputError(f"nbytes must be a non-negative number, got {nbytes!r}")
    return nbytes


def _hops(devices):
    """The ``(device, next device)`` hops of a ring over ``devices``."""
    return zip(devices, devices[1:] + devices[:1])
