"""A step re-scaled to another batch (autodist.graph.rebatch) equals the same step captured at that batch."""

import os

import pytest

from autodist.graph.rebatch import at_batch, batch_tensors, replica_batch
from tests.conftest import ZOO, build_embedding_step, build_mlp_step


def _conv_step(batch_size):
    """Conv2D + BatchNorm + ReLU + pooling + Dense with SGD: convolutions, and batch-norm gradients that tile a
    per-channel tensor back to the batch."""
    import keras
    import numpy as np

    from tests.conftest import _keras_step

    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((12, 12, 3)),
        keras.layers.Conv2D(8, 3, strides=2, padding="same"),
        keras.layers.BatchNormalization(),
        keras.layers.ReLU(),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(4),
    ], name="conv")
    step = _keras_step(model, keras.optimizers.SGD(0.1),
                       keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return step, np.zeros((batch_size, 12, 12, 3), np.float32), np.zeros((batch_size,), np.int32)


def _captured(kind, batch):
    """The step captured at ``batch``, with Keras' layer names counted afresh (the two captures must match)."""
    import keras

    from autodist.graph.capture import capture_script, capture_step

    keras.backend.clear_session()

    if kind == "mlp":
        step, x, y, _ = build_mlp_step(batch)
        return capture_step(step, x, y, model_name="mlp")
    if kind == "embedding":
        step, x, y, _ = build_embedding_step("sgd", batch_size=batch)
        return capture_step(step, x, y, model_name="embedding")
    if kind == "conv":
        step, x, y = _conv_step(batch)
        return capture_step(step, x, y, model_name="conv")
    return capture_script(os.path.join(ZOO, "transformer_lm.py"), ["--batch-size", str(batch)])


@pytest.mark.parametrize("kind", ["mlp", "embedding", "conv", pytest.param("transformer_lm", marks=pytest.mark.slow)])
def test_rescaled_step_equals_the_step_captured_at_that_batch(kind):
    big, small = _captured(kind, 8), _captured(kind, 4)
    rescaled = at_batch(big, 4)
    assert list(rescaled.ops) == list(small.ops)
    for name, op in small.ops.items():
        got = rescaled.ops[name]
        assert (got.output_shapes, got.output_bytes, got.flops) == (op.output_shapes, op.output_bytes, op.flops), name
    assert {v.name: v.rows_touched for v in rescaled.variables.values()} == \
        {v.name: v.rows_touched for v in small.variables.values()}
    assert rescaled.job.batch_size == 4 and rescaled.job.input_shapes == small.job.input_shapes
    # The check can fail: the captured step at the other batch is really different.
    assert sum(o.flops for o in big.ops.values()) > sum(o.flops for o in small.ops.values())


def test_gradients_of_dense_weights_keep_their_shape(mlp_graph):
    carried = batch_tensors(mlp_graph)
    gradients = {g for v in mlp_graph.trainable_variables() for g in v.gradients}
    assert gradients and not gradients & set(carried)
    assert f"{next(n for n, o in mlp_graph.ops.items() if o.type == 'MatMul')}:0" in carried


def test_unknown_batch_cannot_be_rescaled(mlp_graph):
    from autodist.graph.item import GraphItem, JobInfo

    unknown = GraphItem(list(mlp_graph.ops.values()), list(mlp_graph.variables.values()), JobInfo())
    assert at_batch(mlp_graph, mlp_graph.job.batch_size) is mlp_graph
    with pytest.raises(ValueError, match="batch size is unknown"):
        at_batch(unknown, 4)


def test_a_step_without_recorded_input_shapes_is_rescaled(mlp_graph):
    """A later training phase's step can carry no input shapes (the corpus' tf_docs_keras_regression: its second
    fit stopped every replica with "'NoneType' object is not iterable")."""
    from dataclasses import replace

    from autodist.graph.item import GraphItem

    shapeless = GraphItem(list(mlp_graph.ops.values()), list(mlp_graph.variables.values()),
                          replace(mlp_graph.job, input_shapes=None))
    doubled = at_batch(shapeless, 2 * mlp_graph.job.batch_size)
    assert doubled.job.input_shapes is None and doubled.job.batch_size == 2 * mlp_graph.job.batch_size


def test_replica_batch_is_the_largest_slice():
    assert replica_batch(64, 4) == 16
    assert replica_batch(64, 3) == 22
    assert replica_batch(64, 4, micro_batches=2) == 8
    assert replica_batch(2, 8) == 1
