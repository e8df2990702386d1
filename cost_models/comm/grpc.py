"""TensorFlow's gRPC between tasks: point-to-point transfers, PS pushes and pulls, and the allreduce the one-client
runtime sums with ordinary ops."""

from __future__ import annotations

from autodist.errors import InputError
from autodist.resource_spec.spec import receive_link, send_link
from cost_models.comm.collectives import ALGORITHMS
from cost_models.comm.links import GRPC_BANDWIDTH, TCP_EFFICIENCY
from cost_models.comm.phases import check_bytes, hops, slowest
from cost_models.types import Phase


class GrpcTransfers:
    """Tensors moved by TensorFlow between tasks (a part of :class:`CommModel`)."""

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
        nbytes = check_bytes(nbytes)
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
        nbytes = check_bytes(nbytes)
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
        return [p for p in (slowest(inward), *ring, slowest(outward)) if p is not None]

    def graph_allreduce_messages(self, nbytes, devices, algorithm="ring"):
        """The gRPC tensors of :meth:`graph_allreduce_phases`' allreduce: ``(src, dst, bytes, count)`` per pair
        of devices on different nodes (a copy inside a node stays in its task's process)."""
        devices = list(dict.fromkeys(devices))
        n = len(devices)
        if n < 2:
            return []
        if algorithm == "ring":
            messages = [(a, b, nbytes / n, 2 * (n - 1)) for a, b in hops(devices)]
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
        for a, b in hops(devices):
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
