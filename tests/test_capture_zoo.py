"""The zoo's real models: ResNet-50 (model.fit script) and the wide-and-deep recommender."""

import os

import pytest

from autodist.graph.capture import capture_script

from tests.conftest import ZOO


@pytest.mark.slow
def test_resnet50_variables_gradients_and_updates(resnet50_graph):
    import keras
    import numpy as np

    item = resnet50_graph
    model = keras.applications.ResNet50(weights=None)
    trainable = item.trainable_variables()
    # every trainable variable of the Keras model appears exactly once
    names = [v.name for v in trainable]
    assert len(names) == len(set(names)) == len(model.trainable_weights) == 214
    assert sorted(v.shape for v in trainable) == sorted(list(w.shape) for w in model.trainable_weights)
    # parameters: all model weights (BatchNorm moving statistics included) = count_params()
    assert sum(v.bytes for v in item.model_weights()) == model.count_params() * 4
    assert item.parameter_count() == sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    for var in trainable:
        assert var.gradients and var.update_ops, var.name
        assert all(item.ops[g.rpartition(":")[0]].phase == "backward" for g in var.gradients)
        assert all(item.ops[u].phase == "update" for u in var.update_ops)
        assert var.slots == [s for s in var.slots if item.variables[s].slot_of == var.name]
        assert len(var.slots) == 1  # SGD with momentum
    assert item.job.batch_size == 8 and item.job.input_shapes["x"] == [8, 224, 224, 3]
    assert item.job.optimizer == "SGD"
    assert item.total_flops() > 3 * 4e9 * 8  # forward + backward of ~4 GFLOP per image
    conv = [op for op in item.ops.values() if op.type == "Conv2D" and op.phase == "forward"]
    assert len(conv) == 53


@pytest.mark.slow
def test_resnet50_json_round_trip(resnet50_graph, tmp_path):
    from autodist.graph.item import GraphItem

    resnet50_graph.save(tmp_path / "r50.json")
    assert GraphItem.load(tmp_path / "r50.json") == resnet50_graph


@pytest.mark.slow
def test_wide_deep_embeddings_are_sparse_and_adagrad_keeps_them_sparse():
    item = capture_script(os.path.join(ZOO, "wide_deep.py"), ["--batch-size", "32"])
    embeddings = [v for v in item.trainable_variables() if v.shape and v.shape[0] == 1_000_000]
    assert len(embeddings) == 2
    for var in embeddings:
        assert var.sparse_gradient and var.sparse_update, var.name
        assert var.rows_touched == 32 * 8
        assert all(item.ops[u].type.startswith("ResourceScatter") for u in var.update_ops)
    assert item.job.optimizer == "Adagrad"
    dense = [v for v in item.trainable_variables() if v not in embeddings]
    assert dense and not any(v.sparse_gradient for v in dense)
