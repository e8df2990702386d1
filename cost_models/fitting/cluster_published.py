"""Multi-GPU training throughput against the published scaling rows, and the overlap fitted on them.

The rows are Table 2 (M) of the calibration set,
``../shared/reference/published-training-figures.md``: data-parallel
training with Horovod (NCCL allreduce) on 8 to 512 GPUs.  Each evaluated
point names a captured step (cost_models.fitting.published: the Keras equivalent of
the published model, a step table at the published per-GPU batch), its GPU,
precision, gradient accumulation and cluster; the rows we cannot rebuild
are listed in :data:`SKIPPED` with the reason.

How one multi-GPU step is priced (:func:`multi_gpu_step`): every GPU runs
its micro-batches as the GPU kernel model prices them (cost_models.gpu, the
shipped fit on the single-GPU rows); during the backward pass of the last
micro-batch the gradients become ready at an even rate over the backward
ops' time, and Horovod fuses them, in that order, into buckets of at most
64 MiB; the buckets are allreduced in order on one stream (NCCL runs one
collective at a time per communicator), each priced by the communication
model the simulator uses (cost_models.comm: NCCL on collective ops, a ring,
or NCCL's tree across nodes where faster, plus Horovod's fixed cost per
fused collective, which the simulator leaves out for autodist's own
runtime); compute loses the contention share of the
time a collective runs beside it (cost_models.overlap.contention_delay, as
in the simulator); the optimizer update follows the last allreduce.  Every
GPU's compute takes as long as the slowest of the job's GPUs' does
(cost_models.overlap.lockstep_pace, as in the simulator).

The three constants of cost_models.overlap are fitted here (:func:`fit`, a
grid) on the points whose published scaling efficiency is known, and
:func:`write_shipped` saves that fit as the package data the simulator
takes NCCL's contention from.  :func:`evaluate` reports every point
with the shipped constants and with constants fitted without the point's
system (leave one system out).

Efficiency is the multi-GPU throughput over GPUs x single-GPU throughput;
the published one is the row's stated speedup over one GPU, or the
single-GPU figure of the same source and software (a G row), else unknown.
Where it is known, the predicted efficiency prices the same step with its
single-GPU times scaled to that published single-GPU throughput, so that it
judges the communication and the overlap alone (how much of the step they
cannot hide depends on how long the step is): the GPU model's own error on
the row (ResNet-50 on p3.16xlarge, M42: 1018 img/s modelled, 740
published) shows in the predicted throughput, not twice.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from cost_models.comm import CommModel
from cost_models.overlap import OVERLAP_FILE, NcclOverlap, contention_delay, lockstep_pace
from cost_models.gpu import GpuKernelParams
from cost_models.fitting.published import step_at

# Horovod's default tensor-fusion threshold (HOROVOD_FUSION_THRESHOLD, 64 MiB; horovod.readthedocs.io,
# "Tensor Fusion").
FUSION_BYTES = 64 * 2**20
# Grid the three constants are fitted over: seconds per collective, the fraction of a collective's time that
# the compute beside it loses, and the relative spread of GPU speed (the fit lands inside each range).
COLLECTIVE_SECONDS = tuple(np.linspace(0.0, 0.02, 41))
CONTENTION = tuple(np.linspace(0.0, 1.0, 21))
SPEED_SPREAD = tuple(np.linspace(0.0, 0.06, 13))


@dataclass(frozen=True)
class ClusterRun:
    """One published multi-GPU throughput figure and the job behind it (batch: per GPU)."""

    row: str
    point: str
    config: str
    device: str
    precision: str
    xla: bool | None
    framework: str
    layout: str  # as cost_models.fitting.published.PublishedRun's
    batch: int
    micro_batches: int
    nodes: int
    system: str
    throughput: float
    efficiency: float | None = None  # published, where known
    efficiency_source: str = ""
    note: str = ""

    @property
    def id(self):
        return f"{self.row}/{self.point}"


# System -> (its GPU model, GPUs per node, NICs per node).  From NVIDIA's DGX user guides: DGX-1, 8x V100 on
# NVLink and 4x EDR InfiniBand; DGX-2(H), 16x V100 32GB on NVSwitch and 8x EDR; DGX A100, 8x A100 on NVSwitch
# and 8x HDR; DGX H100, 8x NDR (the multi-node rows do not state the fabric: the DGX's own is assumed).  AWS
# p3.16xlarge: 8x V100 16GB on NVLink, 25 GbE (autodist.resource_spec.presets).
SYSTEMS = {
    "DGX-1": ("V100-16GB", 8, ["ib-edr"] * 4),
    "DGX-2": ("V100-32GB", 16, ["ib-edr"] * 8),
    "DGX-2H": ("V100-32GB", 16, ["ib-edr"] * 8),
    "DGX A100 40GB": ("A100-40GB", 8, ["ib-hdr"] * 8),
    "DGX A100 80GB": ("A100-80GB", 8, ["ib-hdr"] * 8),
    "8x H100 SXM": ("H100-SXM", 8, ["ib-ndr"] * 8),
    "p3.16xlarge": ("V100-16GB", 8, ["eth-25g"]),
}


def cluster_of(run):
    """The :class:`ResourceSpec` of ``run``'s nodes."""
    from autodist.resource_spec.cluster_file import cluster_from_dict

    model, gpus, nics = SYSTEMS[run.system]
    node = {"name": "n", "count": run.nodes, "gpus": {"model": model, "count": gpus}, "nics": nics}
    return cluster_from_dict({"name": f"{run.nodes}x {run.system}", "nodes": [node]}, source=f"row {run.id}")


def _runs(row, point, config, precision, xla, framework, batch, system, points, single=None, note="",
          layout="nhwc"):
    """The :class:`ClusterRun` of each ``(nodes, micro_batches, throughput, efficiency)`` of one row's point.

    ``single``: ``(throughput, source)`` of the published single-GPU figure the efficiency is taken from.
    """
    device, gpus, _ = SYSTEMS[system]
    out = []
    for nodes, micro_batches, throughput, efficiency in points:
        source = "speedup stated in the row" if efficiency is not None else ""
        if efficiency is None and single is not None:
            efficiency = throughput / (nodes * gpus * single[0])
            source = single[1]
        label = point if len(points) == 1 else f"{point}-{nodes}n"
        out.append(ClusterRun(row, label, config, device, precision, xla, framework, layout, batch, micro_batches,
                              nodes, system, throughput, efficiency, source, note))
    return out


GA_NOTE = "micro-batches at 4 and 16 nodes from the stated global batch 65536"
# The DLE BERT runs (M7-M14) ran with XLA: at DLE@729963dd every predefined config whose batch sizes match these
# rows sets use_xla="true" (TensorFlow/LanguageModeling/BERT/scripts/configs/pretrain_config.sh: dgx1 16/8 lines
# 69/82, dgx2 64/32 lines 41/54, dgxa100 64/64 and 16/8 lines 13/26; TensorFlow2/LanguageModeling/BERT/scripts/configs/
# pretrain_config.sh: 312/176 lines 27/46, 60/32 lines 67/86), as the single-GPU rows G10-G18 record.
DLE_BERT_XLA = True
ROWS = tuple(
    _runs("M1", "fp32", "resnet50-fp32", "fp32", True, "tf1", 128, "DGX-1", [(1, 1, 3170, 7.69 / 8)])
    + _runs("M1", "amp", "resnet50-mp", "fp16", True, "tf1", 256, "DGX-1", [(1, 1, 9510, 7.48 / 8)])
    + _runs("M2", "fp32", "resnet50-fp32-fbn", "fp32", False, "tf1", 128, "DGX-1", [(1, 1, 2785.81, 7.54 / 8)])
    + _runs("M2", "amp", "resnet50-mp-fbn", "fp16", False, "tf1", 256, "DGX-1", [(1, 1, 8277.91, 7.53 / 8)])
    + _runs("M3", "tf32", "resnet50-fp32", "tf32", True, "tf1", 256, "DGX A100 40GB", [(1, 1, 7000, 7.70 / 8)])
    + _runs("M3", "amp", "resnet50-mp", "fp16", True, "tf1", 256, "DGX A100 40GB", [(1, 1, 17400, 7.32 / 8)])
    + _runs("M4", "fp32", "resnet50-fp32", "fp32", True, "tf1", 128, "DGX-2", [(1, 1, 6500, 15.05 / 16)])
    + _runs("M4", "amp", "resnet50-mp", "fp16", True, "tf1", 256, "DGX-2", [(1, 1, 17250, 13.27 / 16)])
    + _runs("M5", "fp32", "resnet50-fp32-fbn", "fp32", False, "tf1", 128, "DGX-2", [(1, 1, 5347.83, 13.88 / 16)])
    + _runs("M5", "amp", "resnet50-mp-fbn", "fp16", False, "tf1", 256, "DGX-2", [(1, 1, 16290.42, 15.95 / 16)])
    + _runs("M6", "fp32", "resnext101-fp32-fbn", "fp32", None, "tf1", 64, "DGX-1", [(1, 1, 1210, 7.29 / 8)])
    + _runs("M6", "amp", "resnext101-mp-fbn", "fp16", None, "tf1", 128, "DGX-1", [(1, 1, 4160, 7.35 / 8)])
    + _runs("M7", "amp", "bert_large-s128-tf1-amp", "fp16", DLE_BERT_XLA, "tf1", 16, "DGX-1", [(1, 512, 1001.39, None)],
            (134.34, "G10/amp"))
    + _runs("M7", "fp32", "bert_large-s128-tf1-fp32", "fp32", DLE_BERT_XLA, "tf1", 8, "DGX-1",
            [(1, 1024, 285.79, None)], (39.43, "G10/fp32"))
    + _runs("M8", "amp", "bert_large-s128-tf1-amp", "fp16", DLE_BERT_XLA, "tf1", 64, "DGX A100 40GB",
            [(1, 128, 2871.89, None)],
            (356.845, "G13/amp"))
    + _runs("M8", "tf32", "bert_large-s128-tf1-fp32", "tf32", DLE_BERT_XLA, "tf1", 64, "DGX A100 40GB",
            [(1, 128, 1889.71, None)], (238.10, "G13/tf32"))
    + _runs("M9", "amp", "bert_large-s128-tf1-amp", "fp16", DLE_BERT_XLA, "tf1", 64, "DGX A100 40GB",
            [(4, 32, 11159, None), (16, 8, 41144, None), (32, 4, 77479.87, None)], (356.845, "G13/amp"))
    + _runs("M10", "tf32", "bert_large-s128-tf1-fp32", "tf32", DLE_BERT_XLA, "tf1", 64, "DGX A100 40GB",
            [(4, 32, 7532.00, None), (16, 8, 28605.62, None), (32, 4, 53585.82, None)], (238.10, "G13/tf32"))
    + _runs("M11", "amp", "bert_large-s512-tf1-amp", "fp16", DLE_BERT_XLA, "tf1", 16, "DGX A100 40GB",
            [(32, 16, 16705, None)],
            (70.856, "G14/amp"))
    + _runs("M11", "tf32", "bert_large-s512-tf1-fp32", "tf32", DLE_BERT_XLA, "tf1", 8, "DGX A100 40GB",
            [(32, 16, 9463.80, None)], (39.96, "G14/tf32"))
    + _runs("M12", "amp", "bert_large-s128-tf1-amp", "fp16", DLE_BERT_XLA, "tf1", 64, "DGX-2H",
            [(4, 16, 13192.00, None), (16, 4, 48223.00, None), (32, 2, 86673.64, None)],
            note=f"DGX-2H's 450 W V100s priced as V100-32GB; {GA_NOTE}")
    + _runs("M12", "fp32", "bert_large-s128-tf1-fp32", "fp32", DLE_BERT_XLA, "tf1", 32, "DGX-2H",
            [(4, 32, 3389.83, None), (16, 8, 13217.78, None), (32, 4, 25142.26, None)],
            note=f"DGX-2H's 450 W V100s priced as V100-32GB; {GA_NOTE}")
    + _runs("M13", "amp", "bert_large-s128-mp", "fp16", DLE_BERT_XLA, "tf2", 312, "DGX A100 80GB",
            [(1, 32, 3803.82, None), (2, 16, 7551.37, None), (8, 4, 29711.11, None), (32, 1, 110280.73, None)],
            (485.59, "G17/amp"), note="micro-batches below 32 nodes from the stated global batch 79872")
    + _runs("M13", "tf32", "bert_large-s128-fp32", "tf32", DLE_BERT_XLA, "tf2", 176, "DGX A100 80GB",
            [(1, 64, 2062.98, None), (2, 32, 4084.76, None), (8, 8, 16134.02, None), (32, 2, 59569.77, None)],
            (282.98, "G17/tf32"), note="micro-batches below 32 nodes from the stated global batch 90112")
    + _runs("M14", "amp", "bert_large-s128-mp", "fp16", DLE_BERT_XLA, "tf2", 60, "DGX-2H", [(32, 2, 84223.16, None)],
            note="DGX-2H's 450 W V100s priced as V100-32GB")
    + _runs("M14", "fp32", "bert_large-s128-fp32", "fp32", DLE_BERT_XLA, "tf2", 32, "DGX-2H", [(32, 4, 20094.14, None)],
            note="DGX-2H's 450 W V100s priced as V100-32GB")
    + _runs("M35", "v100", "resnet50-mp", "fp16", None, "pytorch", 256, "DGX-1", [(1, 1, 6174, None)],
            (833, "G30/amp"), layout="nchw",
            note="interconnect not stated: a DGX-1's NVLink assumed; PyTorch DDP's buckets priced as Horovod's; NCHW "
                 "as G30 (LambdaPT's configs pass no --memory-format)")
    + _runs("M42", "fp16", "resnet50-mp-fbn", "fp16", None, "tf1", 256, "p3.16xlarge",
            [(1, 1, 5000, None), (2, 1, 9860, None), (4, 1, 21300, None), (8, 1, 37000, None)],
            (740, "single GPU stated in the row"),
            note="precision not stated: mixed assumed (float32 ResNet-50 at batch 256 does not fit a 16 GB V100)")
)

SKIPPED = (
    ("M15", "BERT-base (BioBERT): gradient accumulation not stated"),
    ("M16", "BERT-base at seq 512 not captured; gradient accumulation not stated"),
    ("M35/a100, M35/h100", "per-GPU batch 1280: no single-GPU figure at that batch, scaling unknown"),
    ("M36", "interconnect not stated, and the calibration notes give its 8-GPU BERT-large scaling (61-63% on "
            "V100 and A100) low confidence"),
    ("M37", "no Transformer-big step captured"),
    ("M38", "batch size not stated"),
    ("M39", "three software setups for one figure; single-GPU figure not stated"),
    ("M40", "precision and batch size not stated"),
    ("M41", "ResNet-101 not captured; precision and batch size not stated"),
)


@dataclass(frozen=True)
class _Step:
    """What pricing one run's multi-GPU step needs, computed once (seconds)."""

    micro_batch: float  # one micro-batch's forward and backward on one GPU
    backward_start: float  # when its backward starts: after the forward ops
    update: float
    buckets: tuple  # (fraction of the backward done when the bucket's gradients are all ready, bytes)


@lru_cache(maxsize=1)
def _params():
    return GpuKernelParams.load()


@lru_cache(maxsize=None)
def _step(run):
    from cost_models.fitting.gpu_calibration import published_gpu_step

    table, scalars = step_at(run.config, run.batch)
    step = published_gpu_step(run, table, scalars)
    _, share = step.shares(_params())
    train = np.where(step.update, 0.0, share)
    start = float(train[table["phase"] == "forward"].sum())  # the backward starts once the forward ran
    total = int(scalars["parameter_bytes"])
    buckets = tuple(((done + min(FUSION_BYTES, total - done)) / total, min(FUSION_BYTES, total - done))
                    for done in range(0, total, FUSION_BYTES))
    return _Step(float(train.sum()), start, float(share[step.update].sum()), buckets)


@lru_cache(maxsize=None)
def _devices(run):
    spec = cluster_of(run)
    return spec, tuple(d.name for d in spec.gpus())


@lru_cache(maxsize=None)
def _collectives(run, collective_seconds):
    """``(seconds of each bucket's allreduce, whether they take from compute)`` as the simulator's communication
    model prices them with ``collective_seconds`` per collective: NCCL on collective ops, a ring or its tree
    across nodes."""
    bare, takes_compute = _bare_collectives(run)
    # The model adds Horovod's fixed cost to every collective on GPUs (CommModel.allreduce_phases), to nothing else.
    fixed = collective_seconds if takes_compute else 0.0
    return tuple(seconds + fixed for seconds in bare), takes_compute


@lru_cache(maxsize=None)
def _bare_collectives(run):
    """:func:`_collectives` without a fixed cost per collective (priced once per run: the fit varies only that)."""
    spec, devices = _devices(run)
    comm = CommModel(spec, overlap=NcclOverlap(0.0, 1.0))
    seconds = {}
    for _, nbytes in _step(run).buckets:
        if nbytes not in seconds:
            phases = comm.allreduce_phases(nbytes, devices, "ring", collective_ops=True, horovod=True)
            seconds[nbytes] = sum(p.seconds for p in phases)
    return tuple(seconds[nbytes] for _, nbytes in _step(run).buckets), comm.compute_contention(devices) is not None


def multi_gpu_step(step, micro_batches, bucket_seconds, contention, pace=1.0):
    """Seconds of one data-parallel step (see the module docstring).

    Buckets run in order on one stream, bucket ``i`` for
    ``bucket_seconds[i]``; compute loses ``contention`` of the time they run
    beside it (cost_models.overlap.contention_delay); every micro-batch takes
    ``pace`` times ``step.micro_batch``, the slowest GPU's time
    (cost_models.overlap.lockstep_pace).
    """
    micro_batch, backward_start = pace * step.micro_batch, pace * step.backward_start
    earlier = (micro_batches - 1) * micro_batch
    compute_end = earlier + micro_batch
    span = micro_batch - backward_start
    free = 0.0
    spans = []
    for (fraction, _), seconds in zip(step.buckets, bucket_seconds):
        start = max(earlier + backward_start + fraction * span, free)
        free = start + seconds
        spans.append((start, free, contention))
    return max(compute_end, free) + contention_delay(compute_end, spans) + step.update


@lru_cache(maxsize=None)
def _anchored_step(run):
    """:func:`_step` with its times scaled to the row's published single-GPU throughput where it has one, so that
    the scaling efficiency judges the communication and the overlap, not the GPU model's error on the row."""
    step = _step(run)
    if run.efficiency is None:
        return step
    published = run.throughput / (_gpus(run) * run.efficiency)
    modelled = run.batch * run.micro_batches / (run.micro_batches * step.micro_batch + step.update)
    scale = modelled / published
    return replace(step, micro_batch=scale * step.micro_batch, backward_start=scale * step.backward_start,
                   update=scale * step.update)


def _gpus(run):
    return run.nodes * SYSTEMS[run.system][1]


def _step_seconds(run, step, overlap):
    """Seconds of ``run``'s multi-GPU step whose single-GPU times are ``step`` (a :class:`_Step`)."""
    seconds, takes_compute = _collectives(run, overlap.collective_seconds)
    return multi_gpu_step(step, run.micro_batches, seconds, overlap.contention if takes_compute else 0.0,
                          lockstep_pace(_gpus(run), overlap.speed_spread))


def efficiency(run, overlap):
    """The scaling efficiency predicted for ``run`` with ``overlap``, from the published single-GPU step where
    known (:func:`_anchored_step`)."""
    step = _anchored_step(run)
    return (run.micro_batches * step.micro_batch + step.update) / _step_seconds(run, step, overlap)


def predict(run, overlap):
    """``(samples per second, scaling efficiency)`` predicted for ``run`` with ``overlap`` (a :class:`NcclOverlap`):
    the throughput from the GPU model's step, the efficiency as :func:`efficiency` gives it."""
    seconds = _step_seconds(run, _step(run), overlap)
    return run.batch * run.micro_batches * _gpus(run) / seconds, efficiency(run, overlap)


def fit(runs):
    """The :class:`NcclOverlap` that minimises the squared efficiency error of ``runs`` (those with a published
    efficiency), over a grid of the fixed cost per collective, the contention and the GPU speed spread."""
    scored = [r for r in runs if r.efficiency is not None]
    contentions = np.array(CONTENTION)
    best = None
    for spread in SPEED_SPREAD:
        for fixed in COLLECTIVE_SECONDS:
            # every contention of the grid priced at once (cost_models.overlap.contention_delay takes an array)
            losses = sum((efficiency(r, NcclOverlap(float(fixed), contentions, float(spread))) - r.efficiency) ** 2
                         for r in scored)
            for contention, loss in zip(CONTENTION, losses):
                if best is None or loss < best[0] - 1e-15:
                    best = (loss, NcclOverlap(float(fixed), float(contention), float(spread)))
    fitted = best[1]
    return NcclOverlap(fitted.collective_seconds, fitted.contention, fitted.speed_spread, [r.id for r in scored])


def evaluate(runs=ROWS):
    """The ``cluster_published`` section: every point with the shipped constants (the product's), and with the
    constants fitted without the point's system (leave one system out)."""
    shipped = NcclOverlap.load(OVERLAP_FILE)
    systems = dict.fromkeys(r.system for r in runs)
    left_out = {system: fit([r for r in runs if r.system != system]) for system in systems}
    rows = []
    for run in runs:
        fitted = predict(run, shipped)
        lono = predict(run, left_out[run.system])
        row = {"id": run.id, "config": run.config, "system": run.system, "nodes": run.nodes,
               "gpus": _gpus(run), "precision": run.precision, "batch": run.batch,
               "micro_batches": run.micro_batches, "published": run.throughput,
               "published_efficiency": run.efficiency, "efficiency_source": run.efficiency_source,
               "predicted": fitted[0], "error": fitted[0] / run.throughput - 1, "predicted_efficiency": fitted[1],
               "predicted_left_out": lono[0], "error_left_out": lono[0] / run.throughput - 1,
               "predicted_efficiency_left_out": lono[1], "note": run.note}
        if run.efficiency is not None:
            row["efficiency_points"] = fitted[1] - run.efficiency
            row["efficiency_points_left_out"] = lono[1] - run.efficiency
        rows.append(row)
    return {"rows": rows, "skipped": [{"row": r, "reason": why} for r, why in SKIPPED],
            "shipped": shipped.to_dict(), "fitted_on_all_rows": _constants(fit(runs)),
            "fitted_without_system": {system: _constants(o) for system, o in left_out.items()},
            "summary": {**_summary(rows, ""), **_summary(rows, "_left_out")}}


def _constants(overlap):
    return {"collective_seconds": overlap.collective_seconds, "contention": overlap.contention,
            "speed_spread": overlap.speed_spread, "fitted_on": overlap.fitted_on}


def write_shipped(path=OVERLAP_FILE, command="python -m cost_models.fitting.cluster_published --fit"):
    """Fit on every row with a published efficiency and save the result as the shipped :class:`NcclOverlap`."""
    fitted = fit(ROWS)
    fitted.command = command
    fitted.save(path)
    return fitted


def _summary(rows, suffix):
    errors = [abs(r[f"error{suffix}"]) for r in rows]
    points = [abs(r[f"efficiency_points{suffix}"]) for r in rows if "efficiency_points" in r]
    median = statistics.median(errors)
    return {f"median_throughput_error{suffix}": median, f"max_throughput_error{suffix}": max(errors),
            f"max_efficiency_points{suffix}": max(points),
            "rows_with_published_efficiency": len(points)}


def report_lines(section):
    """Human-readable lines of :func:`evaluate`'s section."""
    fitted = section["shipped"]
    lines = [f"multi-GPU throughput vs published scaling rows (shipped fixed cost per collective "
             f"{fitted['collective_seconds'] * 1e3:.1f} ms, compute loses {fitted['contention'] * 100:.0f}% of the "
             f"time a collective runs beside it, GPU speed spread {fitted['speed_spread'] * 100:.1f}%, fitted on all "
             "rows / fitted without the row's system):"]
    for r in section["rows"]:
        eff = ""
        if r["published_efficiency"] is not None:
            eff = (f"  efficiency {r['published_efficiency'] * 100:5.1f}% vs {r['predicted_efficiency'] * 100:5.1f}"
                   f" / {r['predicted_efficiency_left_out'] * 100:5.1f}%")
        lines.append(f"  {r['id']:<12} {r['system']:<14} {r['gpus']:>4} GPUs  published {r['published']:9.1f}  "
                     f"predicted {r['predicted']:9.1f} ({r['error'] * 100:+6.1f}%) / {r['predicted_left_out']:9.1f} "
                     f"({r['error_left_out'] * 100:+6.1f}%){eff}")
    for s in section["skipped"]:
        lines.append(f"  {s['row']:<12} not evaluated: {s['reason']}")
    summary = section["summary"]
    for suffix, label in (("", "shipped constants"), ("_left_out", "system left out")):
        lines.append(f"  {label}: median |throughput error| {summary['median_throughput_error' + suffix] * 100:.1f}% "
                     f"worst {summary['max_throughput_error' + suffix] * 100:.1f}%; efficiency on "
                     f"{summary['rows_with_published_efficiency']} rows: worst "
                     f"{summary['max_efficiency_points' + suffix] * 100:.1f} points")
    return lines


if __name__ == "__main__":
    import sys

    if sys.argv[1:] != ["--fit"]:
        sys.exit("usage: python -m cost_models.fitting.cluster_published --fit   (refit and write " + OVERLAP_FILE + ")")
    print(write_shipped())
