"""The published GPU calibration set, as shipped package data.

``data/published/calibration.csv`` transcribes the single-GPU rows of
../shared/reference/published-training-figures.md (Table 1), one line per
published figure, with its row id (``row``) and which figure of the row it
is (``point``).  ``data/published/<config>.npz`` holds the captured step
table of each configuration those figures ran (benchmarks/gpu_published_graphs.py),
at two batch sizes.  Rows whose step is not captured, or whose batch size the
source does not state, are listed with an empty ``config`` and a note, and
are reported, never fitted.

``data/published/graphs/<config>.json.gz`` holds the captured graph itself,
as ``autodist capture`` wrote it, at the second of those batches: the jobs
that ``placement report`` prices for the multi-GPU rows
(cost_models.fitting.cluster_published) and the tests that check a row's
report against its evaluation (tests/test_one_path.py).

``data/published/validation.csv``, in the same columns, holds published
single-GPU figures that are not in the calibration set (rows ``LPT*``: the
other LambdaPT cells of the sources G30/G33/G34 cite).  They are held out:
``costmodel eval`` prices them with the model fitted on the calibration set,
and no fit reads them.
"""

from __future__ import annotations

import csv
import gzip
import json
import os
from dataclasses import dataclass, replace
from functools import lru_cache

from autodist.errors import CostModelError
from autodist.graph.item import JobInfo
from autodist.graph.job_options import PRECISIONS
from cost_models.gpu import LAYOUTS
from cost_models.step_table import at_batch, load_tables

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "published")
GRAPHS_DIR = os.path.join(DATA_DIR, "graphs")
CALIBRATION_CSV = os.path.join(DATA_DIR, "calibration.csv")
VALIDATION_CSV = os.path.join(DATA_DIR, "validation.csv")
COLUMNS = ("row", "point", "model", "config", "device", "precision", "xla", "framework", "layout", "batch",
           "micro_batches", "throughput", "unit", "note")

# config -> (zoo script, its arguments): the Keras equivalents of the published runs.
CONFIGS = {
    "resnet50-fp32": ("resnet50.py", []),
    "resnet50-mp": ("resnet50.py", ["--mixed-precision"]),
    "resnext101-fp32": ("resnext101.py", []),
    "resnext101-mp": ("resnext101.py", ["--mixed-precision"]),
    # NVIDIA's TensorFlow 1 ResNets without XLA: batch norm as TensorFlow's FusedBatchNormV3 kernel.
    "resnet50-fp32-fbn": ("resnet50.py", ["--fused-batch-norm"]),
    "resnet50-mp-fbn": ("resnet50.py", ["--mixed-precision", "--fused-batch-norm"]),
    "resnext101-fp32-fbn": ("resnext101.py", ["--fused-batch-norm"]),
    "resnext101-mp-fbn": ("resnext101.py", ["--mixed-precision", "--fused-batch-norm"]),
    # tf_cnn_benchmarks (2017): batch norm fused too; VGG-16 has none.
    "inception_v3-fp32-fbn": ("inception_v3.py", ["--fused-batch-norm"]),
    "vgg16-fp32": ("vgg16.py", []),
    # NVIDIA's TensorFlow 1 BERT: Google's tanh GELU, and AMP as TensorFlow's graph rewrite of the float32 step.
    "bert_base-s128-tf1-fp32": ("bert_base.py", ["--seq-len", "128", "--gelu", "tanh"]),
    "bert_base-s128-tf1-amp": ("bert_base.py", ["--seq-len", "128", "--gelu", "tanh", "--amp-graph-rewrite"]),
    "bert_large-s128-tf1-fp32": ("bert_large.py", ["--seq-len", "128", "--gelu", "tanh"]),
    "bert_large-s128-tf1-amp": ("bert_large.py", ["--seq-len", "128", "--gelu", "tanh", "--amp-graph-rewrite"]),
    "bert_large-s384-tf1-fp32": ("bert_large.py", ["--seq-len", "384", "--gelu", "tanh"]),
    "bert_large-s384-tf1-amp": ("bert_large.py", ["--seq-len", "384", "--gelu", "tanh", "--amp-graph-rewrite"]),
    "bert_large-s512-tf1-fp32": ("bert_large.py", ["--seq-len", "512", "--gelu", "tanh"]),
    "bert_large-s512-tf1-amp": ("bert_large.py", ["--seq-len", "512", "--gelu", "tanh", "--amp-graph-rewrite"]),
    "bert_base-s384-mp": ("bert_base.py", ["--seq-len", "384", "--mixed-precision"]),
    "bert_large-s128-fp32": ("bert_large.py", ["--seq-len", "128"]),
    "bert_large-s128-mp": ("bert_large.py", ["--seq-len", "128", "--mixed-precision"]),
    "bert_large-s384-fp32": ("bert_large.py", ["--seq-len", "384"]),
    "bert_large-s384-mp": ("bert_large.py", ["--seq-len", "384", "--mixed-precision"]),
}


@dataclass(frozen=True)
class PublishedRun:
    """One published single-GPU throughput figure and the job that produced it."""

    row: str
    point: str
    model: str
    config: str
    device: str
    precision: str
    xla: bool | None  # None: the source does not say
    framework: str
    layout: str  # "nchw": a PyTorch run kept its convolution tensors NCHW (cost_models.conv_layout); "nhwc" otherwise
    batch: int
    micro_batches: int
    throughput: float
    unit: str
    note: str = ""

    @property
    def id(self):
        return f"{self.row}/{self.point}"

    @property
    def evaluated(self):
        return bool(self.config)


def read_calibration(path=CALIBRATION_CSV):
    """The :class:`PublishedRun` of every line of the calibration file.

    Raises CostModelError naming the file and the column or line at fault.
    """
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
            if missing:
                raise CostModelError(f"missing column {missing[0]!r}", source=path)
            return [_run(line, path, n) for n, line in enumerate(reader, start=2)]
    except OSError as exc:
        raise CostModelError(f"cannot read the calibration file ({exc.strerror})", source=path) from None


def _run(line, path, n):
    where = f"{path}:{n}"
    try:
        run = PublishedRun(
            row=line["row"], point=line["point"], model=line["model"], config=line["config"], device=line["device"],
            precision=line["precision"], xla={"1": True, "0": False, "": None}[line["xla"]], framework=line["framework"],
            layout=line["layout"], batch=int(line["batch"]), micro_batches=int(line["micro_batches"]),
            throughput=float(line["throughput"]), unit=line["unit"], note=line["note"] or "")
    except (TypeError, ValueError, KeyError) as exc:
        raise CostModelError(f"malformed line ({type(exc).__name__}: {exc})", source=where) from None
    if run.precision not in PRECISIONS:
        raise CostModelError(f"unknown precision {run.precision!r}", source=where, field="precision")
    if run.layout not in LAYOUTS:
        raise CostModelError(f"unknown layout {run.layout!r} (one of {', '.join(LAYOUTS)})", source=where, field="layout")
    if run.layout == "nchw" and run.framework != "pytorch":
        raise CostModelError("layout nchw is for PyTorch runs: TensorFlow lays its convolutions out itself "
                             "(cost_models.conv_layout)", source=where, field="layout")
    if run.evaluated and (run.config not in CONFIGS or run.batch < 1 or run.micro_batches < 1
                          or run.throughput <= 0):
        raise CostModelError("needs a known config, a positive batch, micro_batches and throughput", source=where)
    return run


@lru_cache(maxsize=None)
def _tables(config):
    path = os.path.join(DATA_DIR, f"{config}.npz")
    if not os.path.exists(path):
        raise CostModelError(f"no captured step for {config!r} (run benchmarks/gpu_published_graphs.py)", source=path)
    return load_tables(path)


def run_job(run, scalars):
    """The job of ``run`` as a user gives it to ``placement report``: the job its capture recorded (``scalars``
    of its cached step), at the run's batch, with the run's XLA setting (``--xla on|off``; a setting the source
    does not state leaves the capture's), micro-batches (``--micro-batches``) and, for a PyTorch run, the
    framework and layout of its kernels (``JobInfo.framework``, ``JobInfo.layout``)."""
    if "job" not in scalars:
        raise CostModelError(f"the cached step of {run.config!r} records no job "
                             "(run benchmarks/gpu_published_graphs.py)", source=os.path.join(DATA_DIR, f"{run.config}.npz"))
    job = JobInfo(**json.loads(scalars["job"]))
    return replace(job, batch_size=run.batch, micro_batches=run.micro_batches,
                   jit_compile={True: "on", False: "off", None: job.jit_compile}[run.xla],
                   framework="pytorch" if run.framework == "pytorch" else "",
                   layout="nchw" if run.layout == "nchw" else "")


def published_step(run):
    """``(table at the run's batch, scalars)`` of the step behind ``run``."""
    return step_at(run.config, run.batch)


def step_at(config, batch):
    """``(table, scalars)`` of the captured step of ``config``, the table at ``batch`` samples per GPU."""
    tables, scalars = _tables(config)
    (a, ta), (b, tb) = sorted((int(scalars[f"batch_{k}"]), t) for k, t in tables.items())
    return at_batch(ta, a, tb, b, batch), scalars


@lru_cache(maxsize=None)
def _captured(config):
    from autodist.graph.item import GraphItem

    path = os.path.join(GRAPHS_DIR, f"{config}.json.gz")
    if not os.path.exists(path):
        raise CostModelError(f"no captured graph for {config!r} (run benchmarks/gpu_published_graphs.py)", source=path)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return GraphItem.from_dict(json.load(f), where=path)


def captured_graph(config):
    """A new GraphItem of ``config``'s cached capture (what ``autodist capture`` wrote for its zoo command): read
    once per process; each call's item shares its op and variable records, which nothing changes, and has a job
    of its own."""
    from autodist.graph.item import GraphItem

    item = _captured(config)
    return GraphItem(list(item.ops.values()), list(item.variables.values()), replace(item.job))


def row_graph(run, gpus=1):
    """The job of ``run`` (a PublishedRun, or a multi-GPU row of cost_models.fitting.cluster_published) as a user
    hands it to ``placement report`` on ``gpus`` GPUs: the cached capture with the row's ``--xla`` and
    ``--micro-batches`` (:func:`run_job`), at ``--global-batch`` of the row's batch per GPU times its micro-batches
    times ``gpus`` (autodist.graph.semantics.planned_batch); for a PyTorch row, the framework and layout of its
    kernels (JobInfo fields no capture sets)."""
    from autodist.graph.job_options import with_job_options
    from autodist.graph.semantics import planned_batch

    job = run_job(run, published_step(run)[1])
    item = with_job_options(captured_graph(run.config), micro_batches=run.micro_batches, xla=job.jit_compile)
    item.job = replace(item.job, framework=job.framework, layout=job.layout)
    return planned_batch(item, gpus, run.batch * run.micro_batches * gpus)
