"""Which convolutions cuDNN can run as Winograd transforms (cost_models.winograd), on a real captured Keras step,
and how the GPU kernel model prices them."""

import numpy as np
import pytest

from cost_models.fitting.gpu_calibration import device_of
from cost_models.gpu import GpuKernelParams, GpuStep
from cost_models.step_table import step_table
from tests.conftest import capture_layers


def _layers(keras):
    return [keras.layers.Conv2D(8, 1, name="first"), keras.layers.Conv2D(8, 3, padding="same", name="plain"),
            keras.layers.Conv2D(8, 1, name="pointwise"), keras.layers.Conv2D(8, 3, strides=2, name="strided"),
            keras.layers.Conv2D(8, 3, groups=2, name="grouped")]


@pytest.fixture(scope="module")
def captured():
    item = capture_layers(_layers, (24, 24, 4))
    return item, step_table(item)


def test_only_a_plain_3x3_stride_1_convolution_and_its_gradients_are_winograd(captured):
    """Not a 1x1 convolution, not a strided one, not a grouped one (its filter takes half the image's channels)."""
    item, table = captured
    convs = {name: bool(flag) for name, op_type, flag in zip(item.ops, table["op_type"], table["winograd"])
             if op_type.startswith("Conv2D")}
    assert len(convs) == 14  # each layer's convolution and its gradients, but the first's input gradient (pruned)
    assert sorted(name.rpartition("/")[2] for name, flag in convs.items() if flag and "/plain_" in name) == [
        "Conv2DBackpropFilter", "Conv2DBackpropInput", "convolution"]
    assert not [name for name, flag in convs.items() if flag and "/plain_" not in name]


def test_winograd_speeds_up_float32_convolutions_on_cuda_cores_only(captured):
    """On a V100 a float32 Winograd convolution runs at the fitted factor over its class's efficiency; as TF32 on an
    A100 (tensor cores: implicit GEMM) it runs at its class's, as every other op does."""
    _, table = captured
    params = GpuKernelParams.load()
    assert params.shared["winograd"] > 1.0
    plain = dict(table, winograd=np.zeros_like(table["winograd"]))
    marked = table["winograd"] > 0
    for device, precision, faster in (("V100-16GB", "fp32", True), ("A100-40GB", "tf32", False)):
        with_it, without = (GpuStep(t, device_of(device), precision, xla=False).kernel_seconds(params)
                            for t in (table, plain))
        assert (with_it[~marked] == without[~marked]).all()
        assert ((with_it[marked] < without[marked]).all() if faster else (with_it[marked] == without[marked]).all())
