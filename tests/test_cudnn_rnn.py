"""A Keras LSTM or GRU that runs on cuDNN on a GPU is priced as cuDNN's kernels, not as the loop capture traced."""

import copy
import warnings

import pytest

from autodist.graph.item import GraphItem
from autodist.resource_spec.presets import DEVICE_MODELS
from cost_models.cudnn_rnn import cudnn_kernels, cudnn_rnn_loops
from cost_models.model import CostModel
from cost_models.prior import OP_CLASS

BATCH, STEPS, EMBEDDING, UNITS = 8, 12, 16, 8
# keras.io's bidirectional LSTM (corpus: keras_io_bidirectional_lstm_imdb) over a fixed sequence, a GRU, and an LSTM
# whose ReLU keeps it off cuDNN; the embedding is wider than the units, so that input and recurrent products differ.
SCRIPT = f"""
import keras
import numpy as np

inputs = keras.Input(({STEPS},), dtype="int32")
x = keras.layers.Embedding(50, {EMBEDDING})(inputs)
x = keras.layers.Bidirectional(keras.layers.LSTM({UNITS}, return_sequences=True))(x)
x = keras.layers.GRU({UNITS}, return_sequences=True, name="gru")(x)
x = keras.layers.LSTM({UNITS}, activation="relu", name="relu_lstm")(x)
model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))
model.compile(optimizer="adam", loss="binary_crossentropy")
model.fit(np.zeros((32, {STEPS}), "int32"), np.zeros(32, "float32"), batch_size={BATCH})
"""


@pytest.fixture(scope="module")
def rnn_item(tmp_path_factory):
    from autodist.graph.capture import capture_script

    script = tmp_path_factory.mktemp("rnn") / "rnn.py"
    script.write_text(SCRIPT)
    return capture_script(str(script))


def _gates(loop_op):
    return 3 if "/gru" in loop_op else 4


def test_the_cudnn_layers_loops_and_their_gradients_are_found_not_the_relu_lstm(rnn_item):
    found = cudnn_rnn_loops(rnn_item)
    assert len(rnn_item.loops) == 8  # four layers' time steps and their gradients
    assert len(found) == 6
    assert not any("relu_lstm" in name for name in found)
    assert all("relu_lstm" in name for name in set(rnn_item.loops) - found)


def test_only_the_recurrent_product_and_one_pointwise_kernel_run_per_time_step(rnn_item):
    for name in cudnn_rnn_loops(rnn_item):
        loop = rnn_item.loops[name]
        body = GraphItem(loop.ops, [], rnn_item.job, loop.loops)
        kernels, per_step = cudnn_kernels(loop, body, rnn_item.job)
        assert loop.trips == STEPS and len(per_step) == 2, name
        recurrent = [op for n, op in kernels.ops.items() if n in per_step and OP_CLASS.get(op.type) == "matmul"]
        assert len(recurrent) == 1, name
        # state (batch x units) times the recurrent kernel (units x gates*units), or the gates' gradient times its
        # transpose: the same multiplies either way.
        assert recurrent[0].flops == 2 * BATCH * UNITS * _gates(name) * UNITS, name
        products = sum(op.flops for op in loop.ops if OP_CLASS.get(op.type) == "matmul")
        batched = sum(op.flops for n, op in kernels.ops.items() if n not in per_step)
        assert batched == STEPS * (products - recurrent[0].flops), name


def _loop_seconds(item, device):
    costs = CostModel.default().op_costs(item, device)
    return {name: costs[name].seconds for name in item.loops}


def _as_if(item, **job):
    out = copy.deepcopy(item)
    for field, value in job.items():
        setattr(out.job, field, value)
    return out


def test_a_gpu_prices_cudnn_layers_below_their_traced_loops_and_the_rest_as_before(rnn_item):
    v100 = DEVICE_MODELS["V100-16GB"].device("V100-16GB", "n", 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cudnn = _loop_seconds(rnn_item, v100)
        traced = _loop_seconds(_as_if(rnn_item, cudnn_rnns=[], jit_compile="off"), v100)  # as Keras resolved it
        compiled = _loop_seconds(_as_if(rnn_item, jit_compile="on"), v100)
        compiled_traced = _loop_seconds(_as_if(rnn_item, jit_compile="on", cudnn_rnns=[]), v100)
    found = cudnn_rnn_loops(rnn_item)
    for name in rnn_item.loops:
        if name in found:
            assert cudnn[name] < traced[name], name
        else:
            assert cudnn[name] == traced[name], name
    # Under XLA Keras runs no cuDNN op: the loops are priced as traced.
    assert compiled == compiled_traced
