"""Which convolutions cuDNN gets NCHW tensors for, as TensorFlow lays a captured Keras step out on the target GPU
(Grappler's layout optimizer without XLA, XLA's layout assignment with it), and what the transposes cost."""

import numpy as np
import pytest

from cost_models.fitting.gpu_calibration import device_of
from cost_models.gpu import GpuKernelParams, GpuStep
from cost_models.step_table import step_table
from tests.conftest import capture_layers


def _convolutions(trainable=True):
    def layers(keras):
        return [keras.layers.Conv2D(8, 3, trainable=trainable, name="first"), keras.layers.Conv2D(8, 3, name="second")]

    return layers


@pytest.fixture(scope="module")
def float32_step():
    return step_table(capture_layers(_convolutions(), (12, 12, 3)))


def _transposed(table, device, precision, xla):
    step = GpuStep(table, device_of(device), precision, xla=None)
    return step, step.transposed_bytes[xla] > 0


def test_a_tf32_training_step_runs_its_convolutions_nchw_except_under_xla_on_hopper(float32_step):
    """Keras' float32 convolutions run TF32 on an A100; the step has float32 convolution gradients, so Grappler
    lays the graph out NCHW, and XLA before Hopper lays float32 convolutions out NCHW: cuDNN transposes around each
    forward and gradient convolution.  XLA on an H100 lays them out NHWC."""
    for device, xla in (("A100-40GB", False), ("A100-40GB", True), ("H100-SXM", False)):
        step, transposed = _transposed(float32_step, device, "tf32", xla)
        assert step.kinds["tf32"][step.conv].all()
        assert transposed.sum() == step.conv.sum() >= 5, (device, xla)
        assert (step.transposed_bytes[xla][transposed] == 2 * step.bytes[transposed]).all()
    _, transposed = _transposed(float32_step, "H100-SXM", "tf32", True)
    assert not transposed.any()


def test_float32_convolutions_on_cuda_cores_and_half_precision_ones_pay_no_transposes(float32_step):
    """A V100 runs float32 convolutions on CUDA cores, which take NCHW as they are; a mixed-precision step's float16
    convolutions make Grappler keep NHWC, and XLA lays half-precision convolutions out NHWC."""
    for xla in (False, True):
        step, transposed = _transposed(float32_step, "V100-16GB", "tf32", xla)
        assert step.kinds["fp32"][step.conv].all() and not transposed.any()
    mixed = step_table(capture_layers(_convolutions(), (12, 12, 3), policy="mixed_float16"))
    for device in ("V100-16GB", "A100-40GB"):
        for xla in (False, True):
            step, transposed = _transposed(mixed, device, "fp16", xla)
            assert step.kinds["half"][step.conv].any() and not transposed.any(), (device, xla)


def test_without_a_float32_convolution_gradient_grappler_keeps_tf32_convolutions_nhwc():
    """A frozen first convolution has no gradient at all: with both convolutions frozen the step has no float32
    convolution gradient, and Grappler keeps the TF32 graph NHWC; train the second and it lays it out NCHW."""
    frozen = step_table(capture_layers(lambda keras: [keras.layers.Conv2D(8, 3, trainable=False)], (12, 12, 3)))
    step, transposed = _transposed(frozen, "A100-40GB", "tf32", False)
    assert step.conv.sum() == 1 and not transposed.any()
    trained = step_table(capture_layers(_convolutions(trainable=False), (12, 12, 3)))
    step, transposed = _transposed(trained, "A100-40GB", "tf32", False)
    assert transposed.sum() == step.conv.sum() >= 3


def test_depthwise_convolutions_run_tensorflows_own_kernels_and_pay_no_transposes():
    table = step_table(capture_layers(lambda keras: [keras.layers.DepthwiseConv2D(3), keras.layers.Conv2D(8, 3)],
                                      (12, 12, 3)))
    step, transposed = _transposed(table, "A100-40GB", "tf32", False)
    depthwise = np.char.startswith(table["op_type"].astype(str), "DepthwiseConv2dNative")
    assert (step.conv & depthwise).sum() >= 2 and not transposed[depthwise].any()
    assert transposed.sum() == (step.conv & ~depthwise).sum() >= 2


def test_the_transposes_cost_what_they_move_at_the_memory_bandwidth(float32_step):
    params = GpuKernelParams.load()
    step = GpuStep(float32_step, device_of("H100-SXM"), "tf32", xla=None)
    without, with_xla = step.kernel_seconds(params, xla=False), step.kernel_seconds(params, xla=True)
    arch = params.architecture(step.architecture)
    bandwidth = step.memory_bandwidth * params.shared["memory"] * arch["memory"]
    extra = without - with_xla
    assert extra[step.conv] == pytest.approx(2 * step.bytes[step.conv] / bandwidth, rel=1e-9)


def test_the_report_says_where_and_why_convolutions_run_nchw():
    """On an A100 without XLA the captured float32 step's convolutions run TF32 and Grappler lays the step out NCHW: the
    report gives the transposes' share of the kernel time and the reason; with --xla on an H100 there is nothing to
    say (XLA lays them out NHWC there)."""
    import jsonschema

    from autodist.api import make_plan
    from autodist.report import build_report, render, schema

    item = capture_layers(_convolutions(), (12, 12, 3))
    for preset, xla, transposing in (("dgx-a100:1", "off", True), ("dgx-h100:1", "on", False)):
        doc = build_report(make_plan(item, preset, budget_s=0.2, xla=xla), item)
        jsonschema.validate(doc, schema())
        (gpu,) = [d for d in doc["costs"]["devices"] if d["kind"] == "GPU"]
        assert ("nchw_transposes" in gpu) == transposing, preset
        text = render(doc)
        words = " ".join(text.split())
        assert ("Layout on A100-80GB: Grappler's layout optimizer lays a TF32 training step out NCHW" in words
                ) == transposing
        if transposing:
            assert 0 < gpu["nchw_transposes"]["share"] < 1 and "layout on A100-80GB" in text
            assert max(len(line) for line in text.splitlines()) <= 100
