"""capture_step on real Keras training steps (MLP + Adam, Embedding + SGD/Adam)."""

from autodist.graph import PHASES


def test_mlp_every_trainable_variable_once_with_gradient_and_update(mlp_graph):
    import numpy as np

    from tests.conftest import build_mlp_step

    _, _, _, model = build_mlp_step()
    trainable = mlp_graph.trainable_variables()
    assert sorted(v.shape for v in trainable) == sorted(list(w.shape) for w in model.trainable_weights)
    assert mlp_graph.parameter_count() == model.count_params()
    assert mlp_graph.parameter_bytes() == model.count_params() * 4
    for var in trainable:
        assert var.gradients, var.name
        for grad in var.gradients:
            assert mlp_graph.ops[grad.rpartition(":")[0]].phase == "backward"
        assert var.update_ops and all(mlp_graph.ops[u].phase == "update" for u in var.update_ops)
        assert var.bytes == int(np.prod(var.shape)) * 4
        assert not var.sparse_gradient and not var.sparse_update


def test_mlp_adam_slots_map_to_their_variable(mlp_graph):
    trainable = {v.name: v for v in mlp_graph.trainable_variables()}
    slots = mlp_graph.slot_variables()
    assert len(slots) == 2 * len(trainable)  # Adam: momentum and velocity
    for slot in slots:
        owner = trainable[slot.slot_of]
        assert slot.name in owner.slots
        assert slot.shape == owner.shape and not slot.trainable
    assert mlp_graph.job.optimizer == "Adam"


def test_mlp_phases_and_job_facts(mlp_graph):
    counts = mlp_graph.ops_by_phase()
    assert set(counts) == set(PHASES)
    assert counts["forward"] > 0 and counts["backward"] > 0 and counts["update"] > 0
    matmuls = [op for op in mlp_graph.ops.values() if op.type == "MatMul"]
    assert {op.phase for op in matmuls} == {"forward", "backward"}
    # first layer forward: 16x32 @ 32x64
    forward = [op for op in matmuls if op.phase == "forward" and op.output_shapes == [[16, 64]]]
    assert forward and forward[0].flops == 2 * 16 * 32 * 64
    assert forward[0].output_bytes == [16 * 64 * 4]
    assert mlp_graph.job.batch_size == 16
    assert mlp_graph.job.input_shapes == {"x": [16, 32], "y": [16]}
    assert mlp_graph.job.tf_version.startswith("2.")
    assert mlp_graph.job.model_name == "mlp"


def test_graph_edges_follow_inputs(mlp_graph):
    g = mlp_graph.graph
    assert g.number_of_nodes() == len(mlp_graph.ops)
    for op in mlp_graph.ops.values():
        for tensor in op.data_inputs:
            assert g.has_edge(tensor.rpartition(":")[0], op.name)


def test_embedding_sgd_keeps_the_update_sparse(embedding_graph):
    [emb] = [v for v in embedding_graph.trainable_variables() if v.shape == [10_000, 16]]
    assert emb.sparse_gradient
    assert emb.sparse_update
    assert all(embedding_graph.ops[u].type.startswith("ResourceScatter") for u in emb.update_ops)
    assert emb.rows_touched == 8 * 5  # batch x sequence ids
    dense = [v for v in embedding_graph.trainable_variables() if v is not emb]
    assert dense and not any(v.sparse_gradient or v.sparse_update for v in dense)
    assert embedding_graph.job.optimizer == "SGD"


def test_embedding_adam_densifies_the_update(embedding_adam_graph):
    [emb] = [v for v in embedding_adam_graph.trainable_variables() if v.shape == [10_000, 16]]
    assert emb.sparse_gradient
    assert not emb.sparse_update
    types = {op.type for op in embedding_adam_graph.ops.values() if op.phase == "update"}
    assert "UnsortedSegmentSum" in types
    assert len(emb.slots) == 2


def test_capturing_the_same_step_twice_gives_the_same_item():
    from autodist.graph.capture import capture_step
    from tests.conftest import build_mlp_step

    step, x, y, _ = build_mlp_step(batch_size=4)
    first = capture_step(step, x, y, model_name="twice")
    second = capture_step(step, x, y, model_name="twice")
    assert first.to_dict() == second.to_dict()
    assert first.content_hash() == second.content_hash()


def test_nested_tf_function_calls_are_inlined():
    import keras
    import numpy as np
    import tensorflow as tf

    from autodist.graph.capture import capture_step

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD()

    @tf.function
    def forward(x):
        return model(x)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((forward(x) - y) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    item = capture_step(step, np.zeros((4, 8), np.float32), np.zeros((4, 1), np.float32))
    assert not any(op.type.endswith("PartitionedCall") for op in item.ops.values())
    phases = {op.phase for op in item.ops.values() if op.type == "MatMul"}
    assert phases == {"forward", "backward"}
    assert item.parameter_count() == model.count_params()
    for var in item.trainable_variables():
        assert var.gradients and var.update_ops, var.name


def test_gradients_the_step_never_reads_are_left_out():
    """A frozen layer's weights are still watched by the tape, which builds their gradients and the gradient
    through the layer; the step reads neither and TensorFlow prunes them before it runs, so capture leaves them
    out (tf_docs_images_transfer_learning's frozen MobileNetV2 base: two thirds of its captured FLOPs)."""
    import keras
    import numpy as np

    from autodist.graph.capture import capture_step
    from tests.conftest import _keras_step

    base, head = keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)
    model = keras.Sequential([keras.Input((8,)), base, head])
    base.trainable = False
    step = _keras_step(model, keras.optimizers.SGD(), keras.losses.MeanSquaredError())
    item = capture_step(step, np.zeros((4, 8), np.float32), np.zeros((4, 1), np.float32))
    matmuls = sorted(op.phase for op in item.ops.values() if op.type == "MatMul")
    assert matmuls == ["backward", "forward", "forward"]  # the head kernel's gradient, not the base's
    assert not any(op.type == "ReluGrad" for op in item.ops.values())
    assert [v.name for v in item.trainable_variables()] == [v.path for v in head.trainable_weights]
    for op in item.ops.values():  # nothing left that reads a pruned op
        assert all(t.lstrip("^").rpartition(":")[0] in item.ops or t.lstrip("^") in item.ops for t in op.inputs)
