"""One path: a calibration row priced by ``costmodel eval`` is what ``placement report`` prints for the row's job
on a one-GPU cluster of the row's device (issue 42).

The rows' jobs come from the cached captures of benchmarks/gpu_published_graphs.py
(cost_models/fitting/data/published/graphs, as ``autodist capture`` wrote them), at the row's batch with the row's
options as a user gives them: ``--xla``, ``--micro-batches``, and for a PyTorch row the framework and layout of its
kernels (JobInfo fields no capture sets): cost_models.fitting.published.row_graph.
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
from cost_models.fitting.published import GRAPHS_DIR, published_step, read_calibration, row_graph
from cost_models.gpu import GpuKernelParams


def one_gpu_cluster(tmp_path, device):
    path = tmp_path / f"one-{device}.yaml"
    path.write_text(f"name: one-gpu\nnodes:\n  - name: gpu\n    count: 1\n    gpus: {{model: {device}, count: 1}}\n")
    return str(path)


# Every evaluated calibration row, but G8's: NVIDIA's TensorFlow 1 ResNeXt does not say whether XLA ran, and
# costmodel eval prices it between both (cost_models.gpu.GpuStep with xla None), which no --xla gives.  A PyTorch
# row's job is given --xla off (XLA does not apply).
ROWS = [r if r.xla is not None else replace(r, xla=False) for r in read_calibration()
        if r.evaluated and (r.xla is not None or r.framework == "pytorch")]


def _evaluated(run):
    return throughput(published_gpu_step(run, *published_step(run)), run, GpuKernelParams.load())


@pytest.mark.parametrize("run", ROWS, ids=lambda r: r.id)
def test_the_report_prices_every_row_as_costmodel_eval_does(run, tmp_path):
    """Each row's job as a user gives it to ``placement report`` on one GPU of the row's device: the report's
    data-parallel line there (the ``ring`` baseline: the job run as it is, nothing to synchronise), simulated by
    the report's own code, is ``costmodel eval``'s price of the row."""
    from autodist.resource_spec import load_cluster
    from cost_models import CostModel
    from placement import Problem, Simulator
    from placement.baselines import named

    problem = Problem(row_graph(run), load_cluster(one_gpu_cluster(tmp_path, run.device)), CostModel.default())
    step = Simulator(problem).simulate(named("ring").build(problem)).step_time
    assert run.batch * run.micro_batches / step == pytest.approx(_evaluated(run), rel=1e-6)


@pytest.mark.parametrize("run_id", ["G1/fp32", "G3/fp32", "G30/amp"])
def test_placement_report_prints_the_throughput_costmodel_eval_prints(run_id, tmp_path):
    """The whole command: G1, the zoo's ResNet-50 as captured (Keras' jit_compile='auto' under XLA); G3, with
    TensorFlow 1's fused batch norm, without XLA; G30, a PyTorch run (hand-fused kernels, NCHW convolutions).  The
    plan the report prints is the job run as it is on the GPU."""
    run = next(r for r in ROWS if r.id == run_id)
    plan = make_plan(row_graph(run), one_gpu_cluster(tmp_path, run.device), moves=1)
    reported = run.batch * run.micro_batches / plan.prediction["step_time"]
    assert reported == pytest.approx(_evaluated(run), rel=1e-6)


def test_the_default_capture_asks_for_keras_auto_xla():
    """The zoo's ResNet-50 captured as a user captures it asks for Keras' default jit_compile='auto', which runs
    XLA on a GPU: the job of row G1 needs no option."""
    with gzip.open(os.path.join(GRAPHS_DIR, "resnet50-fp32.json.gz"), "rt") as f:
        job = GraphItem.from_dict(json.load(f)).job
    assert job.jit_compile == "auto" and job.jit_supported


@pytest.mark.parametrize("device, batch", [("V100-16GB", 256), ("A100-80GB", 1280), ("H100-SXM", 1280)])
def test_amp_resnet50_at_the_published_batches_fits_through_the_users_path(device, batch, tmp_path):
    """The zoo's mixed-precision ResNet-50 as a user captures it, at the batches NVIDIA (G4) and LambdaPT ran on
    one GPU: under XLA (Keras' default on a GPU) its batch norm's elementwise chains are never stored."""
    with gzip.open(os.path.join(GRAPHS_DIR, "resnet50-mp.json.gz"), "rt") as f:
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
