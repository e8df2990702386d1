"""How NCCL collectives on GPUs share a training step with the compute beside them, and the GPUs with each other.

Three constants, fitted on the multi-GPU rows (Table 2, M) of the calibration
set ``../shared/reference/published-training-figures.md`` by
:func:`cost_models.fitting.cluster_published.fit`, which prices each row
with the simulator itself (``placement.baselines.horovod_step``), and shipped as
``cost_models/data/nccl_overlap.json`` (refit with ``python
benchmarks/costmodel_eval.py --refit-overlap``):

- ``collective_seconds``: the fixed cost of one of Horovod's fused
  collectives on GPUs, on top of what the communication model prices its
  bytes at (its coordination of a fused bucket between ranks, its cycle,
  the fusion buffer's copies in and out).  Collectives of one group run one
  at a time on one stream, so every bucket pays it in turn.  The published
  rows are Horovod runs, so they pay it; autodist's runtime sums buckets
  with TensorFlow's collective ops, which have no such coordination, so
  the simulator charges it only where it prices Horovod
  (``Simulator(horovod=True)``) (the fit cannot tell how much of the fixed cost is
  Horovod's and how much any runtime's: the contention fitted beside it
  may absorb part of the difference).
- ``contention``: the fraction of the time a collective runs beside compute
  that the compute loses (NCCL's kernels take SMs and memory bandwidth).
  A property of NCCL on the GPU, priced by the simulator
  (``placement.simulator``, through :class:`cost_models.comm.CommModel`)
  with the functions here, for the published rows and for users' plans alike.
- ``speed_spread``: the relative standard deviation of the speed of GPUs
  of one model across a job (boost clocks differ by chip, power and
  temperature; a chip keeps its pace from step to step).  Replicas that
  step in lock-step wait for the slowest of them
  (:func:`lockstep_pace`), so this is a property of the GPUs, and gradient accumulation
  does not average it out.  It is what costs BERT-large 2-9% on one
  8-GPU node even where the allreduce runs once per 64 to 1024
  micro-batches (rows M7, M13 1n of the calibration set).

CPU collectives and transfers over gRPC keep their measured calibrations
(``autodist profile``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from statistics import NormalDist

from cost_models.calibration import VersionedRecord

FORMAT = "autodist.nccl_overlap"
VERSION = 1
OVERLAP_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nccl_overlap.json")
SOURCE = "../shared/reference/published-training-figures.md, Table 2 (M rows): multi-GPU scaling"


@dataclass
class NcclOverlap(VersionedRecord):
    """The fitted fixed cost per GPU collective (seconds), compute contention and GPU speed spread (fractions),
    with provenance.

    ``fitted_on``: the calibration row ids of the fit; ``source``: the file
    they come from; ``command``: what wrote the record.
    """

    FORMAT, VERSION, WHAT = FORMAT, VERSION, "an NCCL overlap calibration"

    collective_seconds: float
    contention: float
    speed_spread: float = 0.0
    fitted_on: list = field(default_factory=list)
    source: str = SOURCE
    command: str = ""


def lockstep_pace(replicas, spread):
    """How much longer the compute of ``replicas`` GPUs in lock-step takes than one typical GPU's (a factor >= 1).

    Each GPU's speed is the typical one times ``1 + spread * z`` for a
    standard normal ``z`` (:class:`NcclOverlap`'s ``speed_spread``); the
    step waits for the slowest, ``spread`` times the expected largest of
    ``replicas`` standard normals later (Blom's approximation,
    ``Phi^-1((n - 0.375) / (n + 0.25))``).
    """
    if replicas < 2 or not spread:
        return 1.0
    return 1.0 + spread * NormalDist().inv_cdf((replicas - 0.375) / (replicas + 0.25))


def contention_delay(compute_end, spans):
    """Seconds a step grows by when compute loses time to the collectives running beside it.

    ``spans``: ``(start, end, contention)`` of every collective; the compute,
    which would end at ``compute_end``, loses ``contention`` of each span's
    part before it ends.  The step ends when both compute and the last
    collective have ended, so the loss shows only where the slowed compute
    outlasts the collectives.
    """
    if not spans:
        return 0.0
    lost = sum(share * max(0.0, min(end, compute_end) - start) for start, end, share in spans)
    last = max(end for _, end, _ in spans)
    return float(max(compute_end + lost, last) - max(compute_end, last))
