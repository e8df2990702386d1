"""Collectives as NCCL and TensorFlow's collective ops run them: allreduce by algorithm, nccl-tests' collectives,
sparse all-gathers, and what a collective takes from compute beside it."""

from __future__ import annotations

import functools

from autodist.collective_stages import stages
from autodist.errors import InputError
from autodist.resource_spec.measured import COLLECTIVES
from autodist.resource_spec.spec import receive_link, send_link
from cost_models.comm.links import NVLS_ARCHITECTURES
from cost_models.comm.phases import check_bytes, hops, link_busy
from cost_models.overlap import lockstep_pace
from cost_models.types import Phase

ALGORITHMS = ("ring", "hierarchical", "master")
# nccl-tests' collectives (autodist.resource_spec.measured.COLLECTIVES) and their bus-bandwidth factor
# busbw / algbw for n ranks (nccl-tests doc/PERFORMANCE.md): S is the whole buffer (allgather's output,
# reducescatter's input).


def bus_factor(op, n):
    """busbw / algbw of collective ``op`` over ``n`` ranks, as nccl-tests reports it."""
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("allgather", "reducescatter"):
        return (n - 1) / n
    return 1.0


class Collectives:
    """Collective operations over devices of ``self.resource_spec`` (a part of :class:`CommModel`)."""

    def allreduce_phases(self, nbytes, devices, algorithm="ring", collective_ops=False, horovod=False):
        """Phases of one allreduce of ``nbytes`` over ``devices``.

        A fused bucket is one allreduce of the bucket's summed bytes, so it
        pays the per-collective latency terms once instead of once per tensor.
        ``collective_ops``: the runtime sums it with TensorFlow's collective
        ops (plans that allreduce everything), priced by ``algorithm``'s
        pricer (:data:`PRICERS`) as launcher.runtime.collective issues it:
        the stages of autodist.collective_stages, each a collective per
        sub-group.  Otherwise NCCL's analytic ring, hierarchical or master
        (nccl-tests' view).  ``horovod``: the collective is one of Horovod's
        fused buckets, which pays the fixed cost per collective fitted on the
        published Horovod runs (``overlap``: its coordination between ranks);
        TensorFlow's collective ops, which autodist's runtime runs, and
        nccl-tests do not.
        """
        nbytes = check_bytes(nbytes)
        devices = list(dict.fromkeys(devices))
        if algorithm not in ALGORITHMS:
            raise InputError(f"unknown allreduce algorithm {algorithm!r} (expected one of {ALGORITHMS})")
        if len(devices) < 2:
            return []
        if collective_ops:
            return PRICERS[algorithm](self, nbytes, devices, horovod)
        groups = self._by_node(devices)
        if algorithm == "ring" or len(groups) == 1:
            phases = self._ring(nbytes, devices)
        elif algorithm == "hierarchical":
            phases = self._hierarchical(nbytes, groups)
        else:
            phases = self._master(nbytes, groups)
        return self._with_fixed(phases, devices, False, horovod)

    def _with_fixed(self, phases, devices, collective_ops, horovod):
        """``phases`` with the fixed cost per collective on the first (gRPC's per tensor, or Horovod's), the empty
        ones dropped."""
        fixed = self.per_tensor_overhead if self._uses_grpc(devices) else 0.0
        if self.compute_contention(devices, collective_ops) is not None:
            fixed = self.overlap.collective_seconds if horovod else 0.0
        if fixed:
            phases[0] = Phase(phases[0].seconds + fixed, phases[0].links)
        return [p for p in phases if p.seconds > 0 or p.links]

    def _ring_on_collective_ops(self, nbytes, devices, horovod=False):
        """One ``CollectiveReduceV2`` over ``devices``: a ring on CPUs; NCCL's ring, tree or NVLS on GPUs.

        Between this machine's processes it costs what ``profile collectives``
        measured over loopback; between emulated nodes, what ``profile
        emulated-links`` measured on their links (:meth:`_emulated_ring`);
        on GPUs what ``cluster calibrate`` measured where it has the shape.
        """
        if self._ring_across_emulated_nodes(devices):
            return [self._emulated_ring(nbytes, devices)]
        on_this_machine = self._loopback_collective(nbytes, devices)
        if on_this_machine is not None and self._all_loopback(devices):
            _, _, links = self._ring_links(devices)
            return [Phase(on_this_machine * self._taking_turns(devices, nbytes), links)]
        groups = self._by_node(devices)
        measured = self._measured("allreduce", nbytes, devices)
        if measured is not None:
            phases = [measured]
        elif len(groups) == 1 and self._has_nvls(devices):
            ring, nvls = self._ring(nbytes, devices), self._nvls(nbytes, devices)
            phases = ring if sum(p.seconds for p in ring) <= nvls.seconds else [nvls]
        else:
            phases = self._ring(nbytes, devices)
            if len(groups) > 1 and self._all_gpus(devices):
                # NCCL takes its tree where that is faster: small messages (TensorFlow's CPU collectives: a ring)
                tree = self._tree(nbytes, devices, groups)
                if sum(p.seconds for p in tree) < sum(p.seconds for p in phases):
                    phases = tree
        return self._with_fixed(phases, devices, True, horovod)

    def _staged(self, algorithm, nbytes, devices, horovod=False):
        """``algorithm``'s stages (autodist.collective_stages) over ``devices``: each group's collective (of
        ``Stage.size``) priced by :data:`STAGE_PRICERS`.  A stage of one group keeps its collective's phases (the
        ring's are the ring pricer's); a stage of several is one phase, its groups at once, a link that several
        cross carrying all of theirs (the slowest group or the busiest link sets it)."""
        spec = self.resource_spec
        out = []
        for stage in stages(algorithm, [spec.device(d).node for d in devices]):
            priced = [STAGE_PRICERS[stage.op](self, stage.size(nbytes), members, horovod)
                      for members in (devices if len(g) == len(devices) else [devices[r] for r in g]
                                      for g in stage.groups) if len(members) > 1]
            if len(priced) == 1:
                out += priced[0]
            elif priced:
                per_group = [[Phase(sum(p.seconds for p in phases), tuple(sorted({l for p in phases for l in p.links})))]
                             for phases in priced]
                busiest = max(link_busy(per_group).values(), default=0.0)
                slowest = max(group[0].seconds for group in per_group)
                out.append(Phase(max(busiest, slowest), tuple(sorted({l for g in per_group for l in g[0].links}))))
        return out

    def _part_of_loopback(self, nbytes, devices, share):
        """``share`` of TensorFlow's CPU allreduce of ``nbytes`` between ``devices``' processes on this machine
        (a collective that moves that share of its bytes per replica), or None where it was not measured or the
        devices are not on loopback."""
        seconds = self._loopback_collective(nbytes, devices)
        if seconds is None or not self._all_loopback(devices) or self._all_gpus(devices):
            return None
        _, _, links = self._ring_links(devices)
        return [Phase(share * seconds * self._taking_turns(devices, nbytes), links)]

    def _taking_turns(self, devices, nbytes):
        """How many times longer a CPU allreduce of ``nbytes`` between ``devices``' processes on this machine
        takes than measured (two processes with this machine's cores to themselves): where an emulated node's
        ``p`` processes outnumber its ``c`` cores, their copies, sums and gRPC work take turns on them,
        ``1 + (p/c - 1)(f - 1)`` with ``f`` what two processes pinned to one core measured
        (TransferCalibration.shared_core_factor, at the 2-task size the ring's steps are priced by: 1.0-1.56x
        here, not 2x: one process's waits for the other's messages leave the core to it); ``p/c`` where that
        was not measured."""
        spec = self.resource_spec
        crowding = max([len(group) / spec.cores_of(group[0]) for group in self._by_node(devices)
                        if spec.cores_of(group[0])] + [1.0])
        if crowding <= 1.0:
            return 1.0
        factor = self.collectives.shared_core_factor(2.0 * nbytes / len(devices))
        return crowding if factor is None else 1.0 + (crowding - 1.0) * (factor - 1.0)

    def _ring_across_emulated_nodes(self, devices):
        """Whether the ring over ``devices`` crosses between emulated nodes (every step of the ring then waits for
        its slowest hop, a shaped link, whatever its hops inside a node)."""
        spec = self.resource_spec
        return any(self._between_emulated_nodes(a, b, spec.path(a, b)) for a, b in hops(devices))

    def _emulated_ring(self, nbytes, devices):
        """TensorFlow's collective ring allreduce of ``nbytes`` between emulated nodes, as measured on their links
        (cost_models.collectives.ring_allreduce_seconds over the 2-task allreduce measured at the ring's slowest
        rate), plus its largest hop delay per step."""
        from cost_models.collectives import ring_allreduce_seconds

        paths = [self.resource_spec.path(a, b) for a, b in hops(devices)]
        rate, n = min(p.bandwidth for p in paths), len(devices)
        measured = functools.partial(self._emulated(devices[0]).allreduce_seconds, rate)
        _, _, links = self._ring_links(devices)
        return Phase(ring_allreduce_seconds(measured, nbytes, n) + 2 * (n - 1) * max(p.latency for p in paths), links)

    def sparse_allgather_phases(self, nbytes, devices, horovod=False):
        """Phases of one sparse gradient's all-gather, ``nbytes`` of rows per replica.

        As launcher.runtime.collective runs it: the replicas' row counts are
        summed (a tiny allreduce), then the indices and the values are
        gathered, each a ring all-gather of every replica's part,
        ``(n-1)/n * S/B + (n-1) a`` over the whole ``S = n * nbytes``
        (hardware.md, "Cost formulas in common use"); each collective pays
        the per-tensor overhead where it runs over gRPC.  The one-client
        runtime copies every replica's rows to every other replica instead:
        the same bytes through each device's link.  ``horovod``: the gather
        is Horovod's (``hvd.allreduce`` of an IndexedSlices gathers its
        indices and values, horovod/tensorflow/__init__.py), a coordinated
        collective that pays Horovod's fixed cost on GPUs, as its fused
        allreduces do (:meth:`allreduce_phases`).
        """
        nbytes = check_bytes(nbytes)
        devices = list(dict.fromkeys(devices))
        n = len(devices)
        if n < 2:
            return []
        counts = self.allreduce_phases(8 * n, devices, "ring", collective_ops=True)
        bandwidth, latency, links = self._ring_links(devices)
        fixed = 2 * self.per_tensor_overhead if self._uses_grpc(devices) else 0.0
        if horovod and self.compute_contention(devices) is not None:
            fixed += self.overlap.collective_seconds
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
        nbytes = check_bytes(nbytes)
        if op not in COLLECTIVES:
            raise InputError(f"unknown collective {op!r} (expected one of {', '.join(COLLECTIVES)})", field="--op")
        devices = list(dict.fromkeys(devices))
        if len(devices) < 2:
            raise InputError(f"a collective needs at least two devices, got {len(devices)}", field="--devices")
        for name in devices:
            self.resource_spec.device(name)
        if op == "allreduce":
            return self.allreduce_phases(nbytes, devices, "ring", collective_ops=True)
        return self._one_ring(op, nbytes, devices)

    def _one_ring(self, op, nbytes, devices):
        """nccl-tests' ``op`` (not allreduce) of ``nbytes`` as measured, else as one ring."""
        measured = self._measured(op, nbytes, devices)
        if measured is not None:
            return [measured]
        n = len(devices)
        bandwidth, latency, links = self._ring_links(devices)
        volume = nbytes if op == "broadcast" else (n - 1) / n * nbytes
        return [Phase(volume / bandwidth + (n - 1) * latency, links)]

    def _loopback_collective(self, nbytes, devices):
        """Seconds of TensorFlow's collective allreduce of ``nbytes`` between ``devices``' processes over this
        machine's loopback, as measured (cost_models.collectives); None without that measurement."""
        if self.collectives is None:
            return None
        from cost_models.collectives import ring_allreduce_seconds

        return ring_allreduce_seconds(self.collectives.predict, nbytes, len(devices))

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

    def _measured(self, op, nbytes, devices):
        """The phase of collective ``op`` as measured on this cluster (``cluster calibrate``'s curves), on the
        ring's links; None where no curve has its shape or its devices are not all GPUs."""
        spec = self.resource_spec
        if not spec.collectives or not self._all_gpus(devices):
            return None
        groups = self._by_node(devices)
        for curve in spec.collectives:
            if curve.applies_to(op, groups):
                return Phase(curve.seconds_for(nbytes), self._ring_links(devices)[2])
        return None

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


# -- the tables: one pricer per allreduce algorithm, one per stage op ---------------------------------------
def _price_ring(comm, nbytes, devices, horovod):
    """ring: one CollectiveReduceV2 over every replica."""
    return comm._ring_on_collective_ops(nbytes, devices, horovod)


def _price_hierarchical(comm, nbytes, devices, horovod):
    """hierarchical: reduce-scatter in each node, allreduce of the shards across nodes, all-gather in each node."""
    return comm._staged("hierarchical", nbytes, devices, horovod)


def _price_master(comm, nbytes, devices, horovod):
    """master: allreduce in each node, allreduce among the nodes' masters, broadcast in each node."""
    return comm._staged("master", nbytes, devices, horovod)


PRICERS = {"ring": _price_ring, "hierarchical": _price_hierarchical, "master": _price_master}


def _stage_reduce_scatter(comm, nbytes, devices, horovod):
    """NCCL's reduce-scatter on GPUs; on CPUs (TensorFlow has none) the allreduce it runs as."""
    if comm._all_gpus(devices):
        return comm._one_ring("reducescatter", nbytes, devices)
    return comm._ring_on_collective_ops(nbytes, devices)


def _stage_all_gather(comm, nbytes, devices, horovod):
    """An all-gather of ``nbytes`` in all: on this machine's CPUs half the allreduce measured (its second half)."""
    return comm._part_of_loopback(nbytes, devices, 0.5) or comm._one_ring("allgather", nbytes, devices)


def _stage_broadcast(comm, nbytes, devices, horovod):
    """A broadcast of ``nbytes``: on this machine's CPUs the allreduce measured, scaled to the bytes each replica
    moves (``nbytes`` against ``2 (n-1)/n`` of them)."""
    n = len(devices)
    return comm._part_of_loopback(nbytes, devices, n / (2 * (n - 1))) or comm._one_ring("broadcast", nbytes, devices)


STAGE_PRICERS = {
    "allreduce": lambda comm, nbytes, devices, horovod: comm._ring_on_collective_ops(nbytes, devices),
    "reduce_scatter": _stage_reduce_scatter,
    "all_gather": _stage_all_gather,
    "broadcast": _stage_broadcast,
}
