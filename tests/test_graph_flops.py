"""FLOP counts on real TensorFlow ops (shapes and attributes as captured) and edge cases."""

import pytest

from autodist.graph.capture import capture_step
from autodist.graph.flops import op_flops


@pytest.fixture(scope="module")
def conv_graph():
    """A real conv net step (Conv2D, DepthwiseConv2D, Dense) captured with capture_step."""
    import keras
    import numpy as np
    import tensorflow as tf

    model = keras.Sequential(
        [
            keras.Input((12, 12, 3)),
            keras.layers.Conv2D(8, 3, padding="same", name="conv"),
            keras.layers.DepthwiseConv2D(3, strides=2, name="depthwise"),
            keras.layers.Flatten(),
            keras.layers.Dense(5, name="head"),
        ]
    )
    opt = keras.optimizers.SGD()

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.mean_squared_error(y, model(x)))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return capture_step(step, np.zeros((2, 12, 12, 3), np.float32), np.zeros((2, 5), np.float32))


def _by_type(item, op_type):
    return [op for op in item.ops.values() if op.type == op_type]


def test_conv2d_and_its_backprops(conv_graph):
    [fwd] = _by_type(conv_graph, "Conv2D")
    assert fwd.output_shapes == [[2, 12, 12, 8]]
    assert fwd.flops == 2 * (2 * 12 * 12 * 8) * (3 * 3 * 3)
    assert fwd.attrs["padding"] == "SAME" and fwd.attrs["strides"] == [1, 1, 1, 1]
    [grad_filter] = _by_type(conv_graph, "Conv2DBackpropFilter")
    assert grad_filter.phase == "backward" and grad_filter.flops == fwd.flops
    # The input's gradient is traced, though nothing reads it: TensorFlow prunes it before the step runs, and so
    # does capture (autodist.graph.tfgraph.live_ops).  Were it run, it would cost what the forward convolution does.
    assert not _by_type(conv_graph, "Conv2DBackpropInput")
    shapes = [[4], [3, 3, 3, 8], [2, 12, 12, 8]], [[2, 12, 12, 3]]
    assert op_flops("Conv2DBackpropInput", *shapes, fwd.attrs) == fwd.flops


def test_depthwise_conv_and_its_backprops(conv_graph):
    [fwd] = _by_type(conv_graph, "DepthwiseConv2dNative")
    assert fwd.output_shapes == [[2, 5, 5, 8]]
    assert fwd.flops == 2 * (2 * 5 * 5 * 8) * 3 * 3
    for op_type in ("DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"):
        [grad] = _by_type(conv_graph, op_type)
        assert grad.phase == "backward"
        assert grad.flops == fwd.flops, op_type


def test_dense_matmuls_forward_and_backward(conv_graph):
    matmuls = {op.phase: [] for op in _by_type(conv_graph, "MatMul")}
    for op in _by_type(conv_graph, "MatMul"):
        matmuls[op.phase].append(op.flops)
    assert matmuls["forward"] == [2 * 2 * 200 * 5]
    assert sorted(matmuls["backward"]) == [2 * 2 * 200 * 5] * 2


def test_einsum_batch_matmul_and_unknown_shapes():
    assert op_flops("Einsum", [[4, 3, 5], [5, 7]], [[4, 3, 7]], {"equation": "abc,cd->abd"}) == 2 * 4 * 3 * 5 * 7
    assert op_flops("Einsum", [[2, 4, 3, 5], [5, 7]], [[2, 4, 3, 7]], {"equation": "...c,cd->...d"}) == (
        2 * 2 * 4 * 3 * 5 * 7
    )
    assert op_flops("BatchMatMulV2", [[8, 4, 6], [8, 6, 5]], [[8, 4, 5]]) == 2 * 8 * 4 * 5 * 6
    assert op_flops("BatchMatMulV2", [[8, 6, 4], [8, 6, 5]], [[8, 4, 5]], {"adj_x": True}) == 2 * 8 * 4 * 5 * 6
    assert op_flops("MatMul", [[-1, 6], [6, 5]], [[-1, 5]]) == 0
    assert op_flops("Conv2D", [[1, 4, 4, 3], None], [[1, 4, 4, 2]]) == 0
    assert op_flops("NoOp", [], []) == 0
    assert op_flops("AddV2", [[3, 4], [3, 4]], [[3, 4]]) == 12
    assert op_flops("Sum", [[3, 4], [1]], [[3]]) == 12


def test_einsum_from_a_real_attention_layer():
    import keras
    import numpy as np
    import tensorflow as tf

    layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    x = np.zeros((3, 6, 8), np.float32)
    layer(x, x)
    concrete = tf.function(lambda q: layer(q, q)).get_concrete_function(tf.TensorSpec(x.shape, tf.float32))
    from autodist.graph.tfgraph import op_infos

    einsums = [op for op in op_infos(concrete.graph) if op.type == "Einsum"]
    assert einsums and all(op.flops > 0 for op in einsums)
    scores = next(op for op in einsums if op.attrs["equation"] == "BTNH,BSNH->BNTS")
    assert scores.flops == 2 * 3 * 2 * 6 * 6 * 4  # batch, heads, query and key positions, key_dim
