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

Two transports, as the runtime uses them (docs/usage.md, "How a plan runs"):

- collective ops (NCCL on GPUs, TensorFlow's ring on CPUs) for plans that
  allreduce everything: :meth:`CommModel.allreduce_phases`;
- TensorFlow's gRPC between tasks for PS traffic and for the allreduced
  part of hybrid plans, which the runtime sums with ordinary ops
  (:meth:`CommModel.ps_phases`, :meth:`CommModel.graph_allreduce_phases`).
"""

from __future__ import annotations

from cost_models.comm.collectives import ALGORITHMS, COLLECTIVES, Collectives, bus_factor
from cost_models.comm.grpc import GrpcTransfers
from cost_models.comm.links import (GRPC_BANDWIDTH, GRPC_MEDIA, LINK_EFFICIENCY, NVLS_ARCHITECTURES, NVLS_EFFICIENCY,
                                    TCP_EFFICIENCY, Links)
from cost_models.comm.overheads import LoopOverheads
from cost_models.comm.phases import link_busy
from cost_models.comm.wire import COMPRESSED_ITEMSIZE, cast_seconds, gradient_bytes, wire_bytes

__all__ = ["ALGORITHMS", "COLLECTIVES", "COMPRESSED_ITEMSIZE", "GRPC_BANDWIDTH", "GRPC_MEDIA", "LINK_EFFICIENCY",
           "NVLS_ARCHITECTURES", "NVLS_EFFICIENCY", "TCP_EFFICIENCY", "CommModel", "bus_factor", "cast_seconds",
           "gradient_bytes", "link_busy", "wire_bytes"]


class CommModel(Links, LoopOverheads, GrpcTransfers, Collectives):
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
        self._rings = {}  # devices of a ring, in order -> its (bandwidth, latency, links) (see _ring_links)
        self.calibration = calibration
        self.collectives = collectives
        self.per_tensor_overhead = calibration.overhead if calibration is not None else 0.0
        self.efficiency = {**LINK_EFFICIENCY, "nvls": NVLS_EFFICIENCY, **(efficiency or {})}
