"""One path: a calibration row priced by ``costmodel eval`` is what ``placement report`` prints for the row's job
on a one-GPU cluster of the row's device (issue 42).

The rows' jobs come from the cached captures of benchmarks/gpu_published_graphs.py (tests/data/published: the
ResNet-50 configurations' graphs, as ``autodist capture`` wrote them), at the row's batch (autodist.graph.rebatch,
as a plan's replicas get theirs) with the row's options as a user gives them: ``--xla``, ``--micro-batches``,
and for a PyTorch row the framework and layout of its kernels (JobInfo fields no capture sets).
"""

import gzip
import json
import os
from dataclasses import replace

import pytest

from autodist.api import make_plan, with_job_options
from autodist.graph.item import GraphItem
from autodist.graph.rebatch import at_batch
from cost_models.fitting.gpu_calibration import published_gpu_step, throughput
from cost_models.fitting.published import published_step, read_calibration, run_job
from cost_models.gpu import GpuKernelParams

GRAPHS = os.path.join(os.path.dirname(__file__), "data", "published")


def one_gpu_cluster(tmp_path, device):
    path = tmp_path / f"one-{device}.yaml"
    path.write_text(f"name: one-gpu\nnodes:\n  - name: gpu\n    count: 1\n    gpus: {{model: {device}, count: 1}}\n")
    return str(path)


def row_graph(run):
    """The row's job as a user hands it to ``placement report``: the cached capture at the row's batch, with the
    row's XLA setting, micro-batches, framework and layout."""
    with gzip.open(os.path.join(GRAPHS, f"{run.config}.json.gz"), "rt") as f:
        item = GraphItem.from_dict(json.load(f))
    item = at_batch(item, run.batch)
    item = with_job_options(item, micro_batches=run.micro_batches, xla={True: "on", False: "off"}[run.xla])
    _, scalars = published_step(run)
    job = run_job(run, scalars)
    item.job = replace(item.job, framework=job.framework, layout=job.layout)
    return item


@pytest.mark.parametrize("run_id", ["G1/fp32", "G3/fp32", "G30/amp"])
def test_placement_report_prints_the_throughput_costmodel_eval_prints(run_id, tmp_path):
    """G1: the zoo's ResNet-50 as captured (Keras' jit_compile='auto' under XLA); G3: with TensorFlow 1's
    fused batch norm, without XLA; G30: a PyTorch run (hand-fused kernels, NCHW convolutions)."""
    run = next(r for r in read_calibration() if r.id == run_id)
    if run.xla is None:  # a PyTorch row: XLA does not apply
        run = replace(run, xla=False)
    params = GpuKernelParams.load()
    evaluated = throughput(published_gpu_step(run, *published_step(run)), run, params)
    plan = make_plan(row_graph(run), one_gpu_cluster(tmp_path, run.device), moves=1)
    reported = run.batch * run.micro_batches / plan.prediction["step_time"]
    assert reported == pytest.approx(evaluated, rel=1e-6)


def test_the_default_capture_asks_for_keras_auto_xla():
    """The zoo's ResNet-50 captured as a user captures it asks for Keras' default jit_compile='auto', which runs
    XLA on a GPU: the job of row G1 needs no option."""
    with gzip.open(os.path.join(GRAPHS, "resnet50-fp32.json.gz"), "rt") as f:
        job = GraphItem.from_dict(json.load(f)).job
    assert job.jit_compile == "auto" and job.jit_supported


@pytest.mark.parametrize("device, batch", [("V100-16GB", 256), ("A100-80GB", 1280), ("H100-SXM", 1280)])
def test_amp_resnet50_at_the_published_batches_fits_through_the_users_path(device, batch, tmp_path):
    """The zoo's mixed-precision ResNet-50 as a user captures it, at the batches NVIDIA (G4) and LambdaPT ran on
    one GPU: under XLA (Keras' default on a GPU) its batch norm's elementwise chains are never stored."""
    with gzip.open(os.path.join(GRAPHS, "resnet50-mp.json.gz"), "rt") as f:
        item = at_batch(GraphItem.from_dict(json.load(f)), batch)
    plan = make_plan(item, one_gpu_cluster(tmp_path, device), moves=1)
    assert plan.graph["xla"] is True
    (gpu, peak), = [(d, b) for d, b in plan.prediction["memory"].items() if "GPU" in d]
    assert peak <= plan.resource_spec.device(gpu).memory_bytes


@pytest.mark.slow
def test_a_real_capture_of_the_g3_job_reports_what_eval_prints(tmp_path):
    """The user's commands for row G3 (NVIDIA's TF1 ResNet-50 without XLA): ``autodist capture resnet50.py --
    --batch-size 128 --fused-batch-norm``, ``placement report --xla off`` on one V100-16GB."""
    from autodist.graph.capture import capture_script

    run = next(r for r in read_calibration() if r.id == "G3/fp32")
    script = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "models", "resnet50.py")
    item = capture_script(script, ["--steps", "1", "--batch-size", str(run.batch), "--fused-batch-norm"])
    plan = make_plan(with_job_options(item, xla="off"), one_gpu_cluster(tmp_path, run.device), moves=1)
    evaluated = throughput(published_gpu_step(run, *published_step(run)), run, GpuKernelParams.load())
    assert run.batch / plan.prediction["step_time"] == pytest.approx(evaluated, rel=1e-6)
