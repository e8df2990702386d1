"""Which ops TensorFlow runs inside another op's GPU kernel without XLA (Grappler's remapper, TF 2.21's rules),
and with XLA: on real Keras steps captured here."""

import numpy as np
import pytest

from autodist.graph.job_options import BATCHNORM_PERSISTENT, CUBLASLT
from cost_models.fitting.gpu_calibration import device_of
from cost_models.gpu import GpuKernelParams, GpuStep
from cost_models.step_table import step_table
from tests.conftest import capture_layers as _capture


def _folded(item, column="remapped"):
    """``{op name: op type}`` of the ops the table marks in ``column``."""
    table = step_table(item)
    return {name: t for name, t, f in zip(item.ops, table["op_type"], table[column]) if f}



def _convolutions(keras):
    return [keras.layers.Conv2D(8, 3, activation="relu", name="spatial"),
            keras.layers.Conv2D(8, 1, activation="relu", name="pointwise"),
            keras.layers.Conv2D(8, 3, name="then_norm"), keras.layers.BatchNormalization(name="norm"),
            keras.layers.ReLU(name="relu")]


def test_only_a_float32_spatial_convolution_runs_its_bias_and_relu_in_its_kernel():
    """TF 2.21 on a GPU fuses Conv2D + BiasAdd + Relu for a 3x3 float32 convolution only: not a 1x1 one, not a
    bias before a batch norm, not a Dense layer (cuBLASLt is off by default).  XLA runs every bias and activation
    after a product in the product's kernel (the old rule, which priced every one of these fused without XLA
    too)."""
    item = _capture(_convolutions, (12, 12, 3))
    remapped = _folded(item)
    assert sorted(t for n, t in remapped.items() if "spatial" in n) == ["BiasAdd", "Relu"]
    assert not [n for n in remapped if "spatial" not in n]
    xla = _folded(item, "fused")
    assert {"BiasAdd", "Relu"} <= {t for n, t in xla.items() if "dense" in n}
    assert "BiasAdd" in {t for n, t in xla.items() if "then_norm" in n}


def test_cublaslt_fuses_a_dense_layer_and_a_float16_convolution_is_never_fused():
    item = _capture(_convolutions, (12, 12, 3), env={CUBLASLT: "1"})
    assert item.job.gpu_env == [CUBLASLT]
    remapped = _folded(item)
    assert sorted(t for n, t in remapped.items() if "dense" in n) == ["BiasAdd", "Relu"]
    assert sorted(t for n, t in remapped.items() if "logits" in n) == ["BiasAdd"]
    mixed = _capture(_convolutions, (12, 12, 3), policy="mixed_float16")
    assert mixed.job.gpu_env == [] and not [n for n in _folded(mixed) if "spatial" in n]


def _fused_norm(keras):
    import tensorflow as tf

    class FusedNorm(keras.layers.BatchNormalization):
        def call(self, inputs, training=None, mask=None):
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(inputs, tf.convert_to_tensor(self.gamma),
                                                       tf.convert_to_tensor(self.beta), data_format="NHWC",
                                                       is_training=True)
            return y

    class ResidualNorm(keras.layers.Layer):
        """relu(norm(conv(x)) + x): the side input a fused batch norm can add before its Relu."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.conv, self.norm = keras.layers.Conv2D(8, 3, padding="same", use_bias=False), FusedNorm()

        def call(self, x, shortcut):
            return tf.nn.relu(self.norm(self.conv(x), training=True) + shortcut)

    return [keras.layers.Conv2D(8, 3, use_bias=False, name="conv"), FusedNorm(name="norm"),
            keras.layers.ReLU(name="relu"), (ResidualNorm(name="residual"), lambda x: x)]


@pytest.mark.parametrize("policy, env, fused", [
    ("mixed_float16", {BATCHNORM_PERSISTENT: "1"}, ["AddV2", "Relu", "Relu", "ReluGrad", "ReluGrad"]),
    ("mixed_float16", {}, []),
    ("float32", {BATCHNORM_PERSISTENT: "true"}, []),
])
def test_a_fused_batch_norm_runs_its_relu_only_in_float16_under_cudnns_persistent_mode(policy, env, fused):
    item = _capture(_fused_norm, (12, 12, 3), env=env, policy=policy)
    assert any(op.type == "FusedBatchNormV3" and op.attrs.get("is_training") for op in item.ops.values())
    assert sorted(_folded(item).values()) == fused
    # The fused kernel still reads the side input and the activation the Relu's gradient masks by (and writes the
    # side input's gradient); a Relu moves nothing.
    table = step_table(item)
    kept = [(t, b, i + o) for t, r, b, i, o in zip(table["op_type"], table["remapped"], table["remapped_bytes"],
                                                  table["input_bytes"], table["output_bytes"]) if r]
    assert all(b == 0 for t, b, _ in kept if t == "Relu")
    assert all(0 < b < moved for t, b, moved in kept if t in ("AddV2", "ReluGrad"))


def test_a_step_without_xla_pays_for_the_ops_the_remapper_leaves_and_with_xla_for_fewer():
    """Priced on a V100: the 1x1 convolution's bias and Relu launch kernels without XLA (the old rule priced them
    free), and nothing folded is charged."""
    item = _capture(_convolutions, (12, 12, 3))
    table = step_table(item)
    step = GpuStep(table, device_of("V100-16GB"), "fp32", xla=None)
    params = GpuKernelParams.load()
    without, with_xla = step.kernel_seconds(params, xla=False), step.kernel_seconds(params, xla=True)
    pointwise = np.array(["pointwise" in n and t in ("BiasAdd", "Relu") for n, t in zip(item.ops, table["op_type"])])
    assert pointwise.sum() == 2 and (without[pointwise] > 0).all() and (with_xla[pointwise] == 0).all()
    assert (without[table["remapped"] > 0] == 0).all() and (with_xla[table["fused"] > 0] == 0).all()


def test_tensorflows_own_remapper_fuses_for_the_cpu_here_but_not_for_a_virtual_gpu():
    """Why cost_models.gpu_remapper states the GPU rules rather than running the pass at capture, as
    autodist.graph.amp_rewrite runs its pass: this TensorFlow build fuses Conv2D + BiasAdd + Relu for a CPU and
    nothing for a virtual GPU.  Should a build fuse for it, the pass itself could replace the rules."""
    import tensorflow as tf
    from tensorflow.core.protobuf import config_pb2, device_properties_pb2, meta_graph_pb2
    from tensorflow.python.grappler import cluster, tf_optimizer

    @tf.function
    def layer(x, w, b):
        return tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, w, 1, "SAME"), b))

    concrete = layer.get_concrete_function(tf.TensorSpec((4, 8, 8, 3)), tf.TensorSpec((3, 3, 3, 8)),
                                           tf.TensorSpec((8,)))
    fused = {}
    for kind in ("CPU", "GPU"):
        device = f"/job:localhost/replica:0/task:0/device:{kind}:0"
        meta = meta_graph_pb2.MetaGraphDef()
        meta.graph_def.CopyFrom(concrete.graph.as_graph_def())
        for node in meta.graph_def.node:
            node.device = device
        meta.collection_def["train_op"].node_list.value.extend([t.op.name for t in concrete.outputs])
        config = config_pb2.ConfigProto()
        config.graph_options.rewrite_options.optimizers[:] = ["remap"]
        config.graph_options.rewrite_options.min_graph_nodes = -1
        named = device_properties_pb2.NamedDevice(name=device, properties=device_properties_pb2.DeviceProperties(
            type=kind, environment={"architecture": "8.0", "cuda": "12000", "cudnn": "8900"}))
        out = tf_optimizer.OptimizeGraph(config, meta, cluster=cluster.Cluster(devices=[named]))
        fused[kind] = sorted(node.op for node in out.node if node.op.startswith("_Fused"))
    assert fused == {"CPU": ["_FusedConv2D"], "GPU": []}
