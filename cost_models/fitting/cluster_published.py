"""Multi-GPU training throughput against the published scaling rows, and the overlap fitted on them.

The rows are Table 2 (M) of the calibration set,
``../shared/reference/published-training-figures.md``: data-parallel
training with Horovod (NCCL allreduce) on 8 to 512 GPUs.  Each evaluated
point names the zoo configuration of the published model
(cost_models.fitting.published.CONFIGS), its GPU, precision, gradient
accumulation and cluster; the rows we cannot rebuild are listed in
:data:`SKIPPED` with the reason.

One path: every point is priced by the code ``placement report --global-batch
N`` runs.  Its job is the configuration's cached capture with the row's
``--xla`` and ``--micro-batches`` at the row's global batch
(cost_models.fitting.published.row_graph), its cluster the row's nodes
(:func:`cluster_of`), and the step is what the simulator gives the job run as
Horovod runs it (placement.baselines.horovod_step: the ``ring`` baseline's
64 MiB buckets in gradient-ready order, NCCL's ring or tree, and Horovod's
fixed cost per fused collective).  The simulator prices the GPUs' compute
with the shipped GPU kernel model, the collectives with the communication
model, the compute they slow beside them and the lock-step of GPUs of
uneven speed with cost_models.overlap's constants.

Published scaling figures from outside the calibration set judge the same
pricing and enter no fit (:data:`VALIDATION`, priced with the shipped
constants).

Efficiency is the multi-GPU throughput over GPUs x single-GPU throughput.
The predicted one divides by one GPU of the row's cluster running one
replica's share alone, priced the same way (placement.scaling: what
``placement report`` prints on a one-GPU cluster, and the denominator of the
weak scaling it prints); the published one is the row's stated speedup over one
GPU, or the single-GPU figure of the same source and software (a G row),
else unknown.

The three constants of cost_models.overlap are fitted here (:func:`fit`) on
the points whose published efficiency is known, by coordinate descent over
the grid :data:`GRID` from its middle: each sweep tries every value of one
constant with the others held.  Every (point, constants) pair is simulated
once per process and kept (:func:`shared_pricer`), so the fits that leave one
system out, which :func:`evaluate` reports beside the shipped constants,
mostly reuse the fit on every row's simulations, and an evaluation after a
refit (``benchmarks/costmodel_eval.py --refit-overlap``) reuses the refit's.  :func:`write_shipped`
saves the fit on every row as the package data the simulator reads.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from cost_models.overlap import OVERLAP_FILE, NcclOverlap

# The grid the three constants are fitted over: seconds of Horovod's fixed cost per fused collective, the fraction of
# a collective's time that the compute beside it loses, and the relative spread of GPU speed.
GRID = {"collective_seconds": tuple(float(x) for x in np.linspace(0.0, 0.02, 21)),
        "contention": tuple(float(x) for x in np.linspace(0.0, 1.0, 11)),
        "speed_spread": tuple(float(x) for x in np.linspace(0.0, 0.06, 13))}
# Horovod sums the rows of a sparse gradient (BERT's token embedding) as a dense tensor: NVIDIA's TensorFlow 1 BERT
# wraps its optimizer in hvd.DistributedOptimizer(optimizer, sparse_as_dense=True) (DeepLearningExamples,
# TensorFlow/LanguageModeling/BERT/optimization.py); the TensorFlow 2 rows (M13, M14) are priced the same, their script
# unchecked.  The other models have no sparse gradient.
SPARSE_AS_DENSE = True
HOW = ("each point's job is its zoo configuration's cached capture with the row's --xla and --micro-batches at "
       "--global-batch (per-GPU batch x micro-batches x GPUs), priced by placement report's simulator on the row's "
       "cluster as Horovod runs it (placement.baselines.horovod_step, sparse gradients summed dense); efficiency over "
       "the same job on one GPU")


@dataclass(frozen=True)
class ClusterRun:
    """One published multi-GPU throughput figure and the job behind it (batch: per GPU)."""

    row: str
    point: str
    config: str
    device: str
    precision: str
    xla: bool  # the row's --xla on|off
    framework: str
    layout: str  # as cost_models.fitting.published.PublishedRun's
    batch: int
    micro_batches: int
    nodes: int
    system: str
    throughput: float | None  # published samples per second (None: the source states only the efficiency)
    efficiency: float | None = None  # published, where known
    efficiency_source: str = ""
    note: str = ""
    gpus_per_node: int = 0  # 0: every GPU of the system's nodes
    horovod: bool = True  # Horovod's collectives, else TensorFlow's own NCCL all-reduce

    @property
    def id(self):
        return f"{self.row}/{self.point}"


# System -> (its GPU model, GPUs per node, NICs per node).  From NVIDIA's DGX user guides: DGX-1, 8x V100 on
# NVLink and 4x EDR InfiniBand; DGX-2(H), 16x V100 32GB on NVSwitch and 8x EDR; DGX A100, 8x A100 on NVSwitch
# and 8x HDR; DGX H100, 8x NDR (the multi-node rows do not state the fabric: the DGX's own is assumed).  AWS
# p3.16xlarge: 8x V100 16GB on NVLink, 25 GbE (autodist.resource_spec.presets).  The first DGX-1, 8x P100 on NVLink
# 1.0 and 4x EDR InfiniBand.  Horovod's benchmark servers, "4 Pascal GPUs each connected by RoCE-capable 25 Gbit/s
# network" (the GPU not named: P100 PCIe 16GB assumed, the data-centre Pascal of 2017 sold for PCIe servers).
SYSTEMS = {
    "DGX-1": ("V100-16GB", 8, ["ib-edr"] * 4),
    "DGX-1 P100": ("P100-SXM2", 8, ["ib-edr"] * 4),
    "DGX-2": ("V100-32GB", 16, ["ib-edr"] * 8),
    "DGX-2H": ("V100-32GB", 16, ["ib-edr"] * 8),
    "DGX A100 40GB": ("A100-40GB", 8, ["ib-hdr"] * 8),
    "DGX A100 80GB": ("A100-80GB", 8, ["ib-hdr"] * 8),
    "8x H100 SXM": ("H100-SXM", 8, ["ib-ndr"] * 8),
    "p3.16xlarge": ("V100-16GB", 8, ["eth-25g"]),
    "4x Pascal, 25G RoCE": ("P100-PCIE-16GB", 4, ["roce-25g"]),
}


def cluster_of(run):
    """The :class:`ResourceSpec` of ``run``'s nodes."""
    from autodist.resource_spec.cluster_file import cluster_from_dict

    model, _, nics = SYSTEMS[run.system]
    node = {"name": "n", "count": run.nodes, "gpus": {"model": model, "count": _gpus_per_node(run)}, "nics": nics}
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
# A user gives placement report --xla on or off; where a TensorFlow 1 row does not state it (M6, M42), off:
# TensorFlow 1 compiles nothing with XLA unless the script asks, and the -fbn configurations are its runs without
# XLA (TensorFlow's FusedBatchNormV3 kernel).  PyTorch rows (M35) have no XLA.
NOT_STATED_XLA = False
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
    + _runs("M6", "fp32", "resnext101-fp32-fbn", "fp32", NOT_STATED_XLA, "tf1", 64, "DGX-1", [(1, 1, 1210, 7.29 / 8)])
    + _runs("M6", "amp", "resnext101-mp-fbn", "fp16", NOT_STATED_XLA, "tf1", 128, "DGX-1", [(1, 1, 4160, 7.35 / 8)])
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
    + _runs("M35", "v100", "resnet50-mp", "fp16", False, "pytorch", 256, "DGX-1", [(1, 1, 6174, None)],
            (833, "G30/amp"), layout="nchw",
            note="interconnect not stated: a DGX-1's NVLink assumed; PyTorch DDP's buckets priced as Horovod's; NCHW "
                 "as G30 (LambdaPT's configs pass no --memory-format)")
    + _runs("M42", "fp16", "resnet50-mp-fbn", "fp16", NOT_STATED_XLA, "tf1", 256, "p3.16xlarge",
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


# Never fitted: the published scaling figures that judge the cluster pricing from outside the calibration set.
# TensorFlow's 2017 benchmarks on one DGX-1 with P100s (tensorflow/docs@62da04c site/en/r1/guide/performance/
# benchmarks.md, "Details for NVIDIA DGX-1 (NVIDIA Tesla P100)", training synthetic data, tf_cnn_benchmarks at TF
# b1e174e, CUDA 8 / cuDNN 5.1, sgd): VGG16 with variable_update "replicated (with NCCL)", TensorFlow's own NCCL
# all-reduce, at 1, 2, 4 and 8 GPUs, batch 64 (its table) and 32 ("Other Results").  Efficiency over the same table's
# one-GPU figure.
TFB_NOTE = "tf_cnn_benchmarks, May 2017: TensorFlow's NCCL 1 all-reduce, no XLA"


def _one_dgx1_p100(config, batch, figures):
    """The validation points of one model and batch on one DGX-1 P100: ``figures`` at 1, 2, 4 and 8 GPUs."""
    model = config.split("-")[0]
    return tuple(ClusterRun("TFB1", f"{model}-b{batch}-{gpus}gpu", config, "P100-SXM2", "fp32", False, "tf1", "nhwc",
                            batch, 1, 1, "DGX-1 P100", throughput, throughput / (gpus * figures[0]),
                            "the source's one-GPU figure", TFB_NOTE, gpus_per_node=gpus, horovod=False)
                 for gpus, throughput in zip((2, 4, 8), figures[1:]))


# Horovod's own benchmarks on servers of 4 Pascal GPUs on 25 Gbit/s RoCE, tf_cnn_benchmarks --batch_size 64
# --variable_update horovod on synthetic data; efficiency only, no throughput stated.  128 servers (512 GPUs; horovod/
# horovod README.rst and docs/benchmarks.rst): "90% scaling efficiency for both Inception V3 and ResNet-101, and 68%
# scaling efficiency for VGG-16"; before that chart, 32 servers (128 GPUs; docs/benchmarks.md at horovod@ed0040fe, Oct
# 2017 to May 2018): "90% ... for both Inception V3 and ResNet-101, and 79% scaling efficiency for VGG-16".
HVD_NOTE = "Horovod's README: {} Pascal GPUs (P100 PCIe assumed), 25 Gbit/s RoCE; efficiency only"


def _horovod(config, servers, efficiency):
    """Horovod's validation point of one model on ``servers`` servers of 4 GPUs."""
    model = config.split("-")[0]
    return ClusterRun("HVD1", f"{model}-{4 * servers}gpu", config, "P100-PCIE-16GB", "fp32", False, "tf1", "nhwc", 64,
                      1, servers, "4x Pascal, 25G RoCE", None, efficiency, "stated in the source",
                      HVD_NOTE.format(4 * servers))


VALIDATION = (_one_dgx1_p100("vgg16-fp32", 64, (154, 295, 584, 1081))
              + _one_dgx1_p100("vgg16-fp32", 32, (144, 281, 549, 820))
              + tuple(_horovod(config, servers, efficiency)
                      for servers, figures in ((32, (0.90, 0.79)), (128, (0.90, 0.68)))
                      for config, efficiency in zip(("inception_v3-fp32-fbn", "vgg16-fp32"), figures)))
VALIDATION_SKIPPED = (
    ("TFB1 InceptionV3, ResNet-50, ResNet-152 (DGX-1 P100)",
     "tf_cnn_benchmarks' parameter server on the host CPU inside one process, which neither autodist's runtime nor a "
     "reference pricer runs"),
    ("TFB1 K80 rows", "no Kepler GPU in the device catalogue"),
    ("TFB1 AlexNet", "not captured"),
    ("HVD1 ResNet-101", "not captured"),
)
EVALUATED = ROWS + VALIDATION


def select(names):
    """The rows of :data:`EVALUATED` named by ``names``: point ids (``M9/amp-4n``) or whole rows (``M42``), in table
    order.

    Raises InputError naming a name that matches no row.
    """
    from autodist.errors import InputError

    for name in names:
        if not any(name in (run.id, run.row) for run in EVALUATED):
            raise InputError(f"no evaluated multi-GPU row {name!r} (e.g. {ROWS[0].row} or {ROWS[0].id})",
                             field="--cluster-rows")
    return tuple(run for run in EVALUATED if run.id in names or run.row in names)


@lru_cache(maxsize=1)
def _cost_model():
    from cost_models import CostModel

    return CostModel.default()


def _gpus_per_node(run):
    return run.gpus_per_node or SYSTEMS[run.system][1]


def _gpus(run):
    return run.nodes * _gpus_per_node(run)


class Pricer:
    """The simulated steps of the points, each ``(point, constants)`` once.

    ``allreduce``: what prices a job's data-parallel step on a cluster, as
    Horovod or TensorFlow's own NCCL all-reduce runs it (``ClusterRun.horovod``),
    ``allreduce(item, cluster, cost_model, dense, horovod)`` with ``.problem`` and
    ``.seconds(overlap)`` (placement.baselines.AllreducePricer, as ``placement
    report`` builds the problem).  The caller hands it over (the CLI, the
    benchmark, the tests), as the profiling harnesses are handed what they
    need: the simulator sits above cost_models.  A point's problem is built
    once, its op costs priced once; each set of constants is put into its
    communication model in turn and its Horovod step simulated afresh.
    """

    def __init__(self, allreduce):
        self._allreduce = allreduce
        self._points = {}
        self._seconds = {}
        self._single = {}

    def _point(self, run):
        from cost_models.fitting.gpu_calibration import check_precision
        from cost_models.fitting.published import row_graph

        if run.id not in self._points:
            item = row_graph(run, _gpus(run))
            check_precision(run, item.job)
            self._points[run.id] = self._allreduce(item, cluster_of(run), _cost_model(), SPARSE_AS_DENSE, run.horovod)
        return self._points[run.id]

    def problem(self, run):
        """The placement problem of ``run``'s point, as ``placement report`` builds it."""
        return self._point(run).problem

    def step_seconds(self, run, overlap):
        """Seconds of ``run``'s Horovod step on its cluster with ``overlap``'s constants."""
        key = (run.id, overlap.collective_seconds, overlap.contention, overlap.speed_spread)
        if key not in self._seconds:
            self._seconds[key] = self._point(run).seconds(overlap)
        return self._seconds[key]

    def single_throughput(self, run):
        """Samples per second of one replica's share of ``run``'s job on one GPU of its cluster alone (no constant
        of the overlap applies), as placement.scaling prices a report's weak scaling."""
        from autodist.graph.semantics import one_replica

        key = (run.config, run.device, run.precision, run.xla, run.framework, run.layout, run.batch,
               run.micro_batches)
        if key not in self._single:
            item, cluster = self._point(run).problem.graph_item, cluster_of(run)
            single = self._allreduce(one_replica(item, _gpus(run)), cluster.alone(cluster.gpus()[0].name),
                                     _cost_model(), SPARSE_AS_DENSE)
            self._single[key] = run.batch * run.micro_batches / single.seconds()
        return self._single[key]

    def predict(self, run, overlap):
        """``(samples per second, scaling efficiency)`` predicted for ``run`` with ``overlap``."""
        throughput = run.batch * run.micro_batches * _gpus(run) / self.step_seconds(run, overlap)
        return throughput, throughput / (_gpus(run) * self.single_throughput(run))


@lru_cache(maxsize=None)
def shared_pricer(allreduce):
    """The process's :class:`Pricer` over ``allreduce``: a refit and the evaluation after it reuse each other's
    simulations."""
    return Pricer(allreduce)


def _overlap(index):
    return NcclOverlap(*(GRID[name][i] for name, i in zip(GRID, index)))


def fit(runs, pricer):
    """The :class:`NcclOverlap` that minimises the squared efficiency error of ``runs`` (those with a published
    efficiency): coordinate descent over :data:`GRID` from its middle, until a sweep of every constant changes
    nothing."""
    scored = [r for r in runs if r.efficiency is not None]

    def loss(index):
        overlap = _overlap(index)
        return sum((pricer.predict(r, overlap)[1] - r.efficiency) ** 2 for r in scored)

    point = tuple(len(values) // 2 for values in GRID.values())
    best, moved = loss(point), True
    while moved:
        moved = False
        for axis, values in enumerate(GRID.values()):
            for i in range(len(values)):
                trial = point[:axis] + (i,) + point[axis + 1:]
                trial_loss = loss(trial)
                if trial_loss < best - 1e-15:
                    best, point, moved = trial_loss, trial, True
    fitted = _overlap(point)
    return NcclOverlap(fitted.collective_seconds, fitted.contention, fitted.speed_spread, [r.id for r in scored])


def evaluate(allreduce, runs=EVALUATED):
    """The ``cluster_published`` section: every calibration point with the shipped constants (the product's), and
    with the constants fitted without the point's system (leave one system out); the validation points of ``runs``
    (:data:`VALIDATION`) with the shipped constants alone; all through the user's path (:data:`HOW`;
    ``allreduce``: see :class:`Pricer`)."""
    pricer = shared_pricer(allreduce)
    shipped = NcclOverlap.load(OVERLAP_FILE)
    calibration = [r for r in runs if r not in VALIDATION]
    systems = dict.fromkeys(r.system for r in calibration)
    left_out = {system: fit([r for r in calibration if r.system != system], pricer) for system in systems}
    rows = []
    for run in calibration:
        row = _priced(run, pricer, shipped)
        lono = pricer.predict(run, left_out[run.system])
        row.update({"predicted_left_out": lono[0], "error_left_out": _error(lono[0], run.throughput),
                    "predicted_efficiency_left_out": lono[1]})
        if run.efficiency is not None:
            row["efficiency_points_left_out"] = lono[1] - run.efficiency
        rows.append(row)
    validation = [_priced(run, pricer, shipped) for run in runs if run in VALIDATION]
    return {"how": HOW, "rows": rows, "skipped": [{"row": r, "reason": why} for r, why in SKIPPED],
            "shipped": shipped.to_dict(), "fitted_on_all_rows": _constants(fit(calibration, pricer)),
            "fitted_without_system": {system: _constants(o) for system, o in left_out.items()},
            "summary": {**_summary(rows, ""), **_summary(rows, "_left_out")} if rows else None,
            "validation": {"rows": validation, "summary": _summary(validation, "") if validation else None,
                           "skipped": [{"row": r, "reason": why} for r, why in VALIDATION_SKIPPED]}}


def _priced(run, pricer, overlap):
    """``run``'s point priced with ``overlap``'s constants, beside what was published."""
    throughput, efficiency = pricer.predict(run, overlap)
    row = {"id": run.id, "config": run.config, "system": run.system, "nodes": run.nodes, "gpus": _gpus(run),
           "precision": run.precision, "xla": run.xla, "horovod": run.horovod, "batch": run.batch,
           "micro_batches": run.micro_batches, "global_batch": run.batch * run.micro_batches * _gpus(run),
           "published": run.throughput, "published_efficiency": run.efficiency,
           "efficiency_source": run.efficiency_source, "single_gpu": pricer.single_throughput(run),
           "predicted": throughput, "error": _error(throughput, run.throughput), "predicted_efficiency": efficiency,
           "note": run.note}
    if run.efficiency is not None:
        row["efficiency_points"] = efficiency - run.efficiency
    return row


def _error(predicted, published):
    """Relative error of ``predicted`` against ``published`` (None where nothing was published)."""
    return None if published is None else predicted / published - 1


def _constants(overlap):
    return {"collective_seconds": overlap.collective_seconds, "contention": overlap.contention,
            "speed_spread": overlap.speed_spread, "fitted_on": overlap.fitted_on}


def write_shipped(allreduce, command, path=OVERLAP_FILE):
    """Fit on every row with a published efficiency and save the result as the shipped :class:`NcclOverlap`
    (``allreduce``: see :class:`Pricer`; ``command``: the command that ran the refit, recorded with it)."""
    fitted = fit(ROWS, shared_pricer(allreduce))
    fitted.command = command
    fitted.save(path)
    return fitted


def _summary(rows, suffix):
    errors = [abs(r[f"error{suffix}"]) for r in rows if r[f"error{suffix}"] is not None]
    points = [abs(r[f"efficiency_points{suffix}"]) for r in rows if "efficiency_points" in r]
    return {f"median_throughput_error{suffix}": statistics.median(errors) if errors else None,
            f"max_throughput_error{suffix}": max(errors, default=None),
            "rows_with_published_throughput": len(errors),
            f"median_efficiency_points{suffix}": statistics.median(points) if points else None,
            f"max_efficiency_points{suffix}": max(points, default=None), "rows_with_published_efficiency": len(points)}


def report_lines(section):
    """Human-readable lines of :func:`evaluate`'s section."""
    fitted = section["shipped"]
    lines = [f"multi-GPU throughput vs published scaling rows, priced as placement report --global-batch N prices "
             f"Horovod (shipped fixed cost per collective {fitted['collective_seconds'] * 1e3:.1f} ms, compute loses "
             f"{fitted['contention'] * 100:.0f}% of the time a collective runs beside it, GPU speed spread "
             f"{fitted['speed_spread'] * 100:.1f}%; fitted on all rows / fitted without the row's system):"]
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
    validation = section["validation"]
    if validation["rows"]:
        lines.append("  validation, never fitted (shipped constants):")
        for r in validation["rows"]:
            versus = (f"published {r['published']:9.1f}  predicted {r['predicted']:9.1f} ({r['error'] * 100:+6.1f}%)"
                      if r["error"] is not None else f"published {'-':>9}  predicted {r['predicted']:9.1f} {'':9}")
            lines.append(f"  {r['id']:<26} {r['system']:<19} {r['gpus']:>4} GPUs  {versus}  efficiency "
                         f"{r['published_efficiency'] * 100:5.1f}% vs {r['predicted_efficiency'] * 100:5.1f}%")
        lines.append(_summary_line("validation", validation["summary"], ""))
    for s in validation["skipped"]:
        lines.append(f"  {s['row']} not evaluated: {s['reason']}")
    summary = section["summary"]
    for suffix, label in (("", "shipped constants"), ("_left_out", "system left out")) if summary else ():
        lines.append(_summary_line(label, summary, suffix))
    return lines


def _summary_line(label, summary, suffix):
    """One line of a :func:`_summary`: its throughput errors and its efficiency points, each where rows have them."""
    parts = []
    if summary["rows_with_published_throughput"]:
        parts.append(f"median |throughput error| {summary['median_throughput_error' + suffix] * 100:.1f}% worst "
                     f"{summary['max_throughput_error' + suffix] * 100:.1f}% on "
                     f"{summary['rows_with_published_throughput']} rows")
    if summary["rows_with_published_efficiency"]:
        parts.append(f"efficiency on {summary['rows_with_published_efficiency']} rows: median "
                     f"{summary['median_efficiency_points' + suffix] * 100:.1f} points, worst "
                     f"{summary['max_efficiency_points' + suffix] * 100:.1f} points")
    return f"  {label}: " + "; ".join(parts)
