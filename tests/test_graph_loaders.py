"""load_graph: GraphDef (.pb, .pbtxt) and SavedModel sources, and their failures."""

import pytest

from autodist.errors import CaptureError, InputError
from autodist.graph.loaders import load_graph


@pytest.fixture(scope="module")
def mlp_graph_def(tmp_path_factory):
    """The GraphDef of a real MLP + Adam training step, as .pb and .pbtxt."""
    import tensorflow as tf

    from tests.conftest import build_mlp_step

    step, x, y, model = build_mlp_step()
    concrete = tf.function(step).get_concrete_function(
        tf.TensorSpec(x.shape, tf.float32), tf.TensorSpec(y.shape, tf.int32)
    )
    graph_def = concrete.graph.as_graph_def(add_shapes=True)
    folder = tmp_path_factory.mktemp("graphdef")
    (folder / "step.pb").write_bytes(graph_def.SerializeToString())
    (folder / "no_shapes.pb").write_bytes(concrete.graph.as_graph_def().SerializeToString())
    tf.io.write_graph(graph_def, str(folder), "step.pbtxt", as_text=True)
    return folder, model, len(graph_def.node)


@pytest.mark.parametrize("name", ["step.pb", "step.pbtxt"])
def test_graph_def_step_keeps_variables_gradients_and_slots(mlp_graph_def, name):
    folder, model, nodes = mlp_graph_def
    item = load_graph(folder / name)
    assert len(item.ops) == nodes
    assert item.parameter_count() == model.count_params()
    assert item.job.batch_size == 16
    assert item.job.source.startswith("graphdef:")
    for var in item.trainable_variables():
        assert var.gradients and var.update_ops
        assert len(var.slots) == 2  # Adam, matched through the gradient without Keras names
    counts = item.ops_by_phase()
    assert counts["backward"] and counts["update"] and counts["forward"]


def test_graph_def_without_variable_shapes_is_refused(mlp_graph_def):
    folder, _, _ = mlp_graph_def
    with pytest.raises(CaptureError, match=r"no_shapes.pb: shape of variable .* is unknown .*add_shapes=True"):
        load_graph(folder / "no_shapes.pb")


def test_saved_model_serving_signature_is_forward_only(tmp_path):
    import tensorflow as tf

    from tests.conftest import build_mlp_step

    _, _, _, model = build_mlp_step()

    class Serving(tf.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        @tf.function(input_signature=[tf.TensorSpec((4, 32), tf.float32)])
        def serve(self, x):
            return self.model(x)

    module = Serving(model)
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.serve})
    item = load_graph(tmp_path / "sm")
    assert "no gradients" in item.job.source
    assert item.ops_by_phase()["backward"] == 0 and item.ops_by_phase()["update"] == 0
    assert item.parameter_count() == model.count_params()
    assert {v.name for v in item.trainable_variables()} == {w.path for w in model.weights}
    assert item.job.batch_size == 4
    assert sum(op.flops for op in item.ops.values() if op.type == "MatMul") == 2 * 4 * (32 * 64 + 64 * 10)


def test_corrupt_graph_def(tmp_path):
    path = tmp_path / "broken.pb"
    path.write_bytes(b"\x0a\xff\xff\xff\xff\x0fnot a graph")
    with pytest.raises(CaptureError, match="broken.pb: not a valid GraphDef"):
        load_graph(path)
    text = tmp_path / "broken.pbtxt"
    text.write_text("node { name: 'a' op: \n")
    with pytest.raises(CaptureError, match="broken.pbtxt: not a valid GraphDef"):
        load_graph(text)


def test_graph_def_that_does_not_import(tmp_path):
    path = tmp_path / "dangling.pbtxt"
    path.write_text('node { name: "a" op: "Identity" input: "missing:0" attr { key: "T" value { type: DT_FLOAT } } }\n')
    with pytest.raises(CaptureError, match="dangling.pbtxt: GraphDef does not import"):
        load_graph(path)


def test_unknown_sources(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_graph(tmp_path / "nothing.pb")
    (tmp_path / "notes.txt").write_text("hi")
    with pytest.raises(CaptureError, match="unknown graph file type"):
        load_graph(tmp_path / "notes.txt")
    with pytest.raises(CaptureError, match="not a SavedModel"):
        load_graph(tmp_path)
