"""Property: any valid GraphItem survives JSON text and back unchanged (no TensorFlow involved)."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from autodist.graph.item import PHASES, GraphItem, JobInfo, OpInfo, VariableInfo

names = st.text(alphabet="abcdefghij_/0123456789", min_size=1, max_size=12)
dims = st.lists(st.integers(min_value=-1, max_value=4096), max_size=4)
shapes = st.one_of(st.none(), dims)
attr_values = st.one_of(st.booleans(), st.integers(), names, st.lists(st.integers(), max_size=4))


@st.composite
def graph_items(draw):
    """A GraphItem that holds every invariant of autodist.graph.checks (inputs, gradients and slots resolve)."""
    op_names = draw(st.lists(names, min_size=1, max_size=12, unique=True))
    ops, tensors = [], []
    for i, name in enumerate(op_names):
        n_out = draw(st.integers(1 if i == 0 else 0, 3))
        inputs = [draw(st.sampled_from(tensors)) for _ in range(draw(st.integers(0, 2)))] if tensors else []
        if i and draw(st.booleans()):
            inputs.append(f"^{draw(st.sampled_from(op_names[:i]))}")
        ops.append(
            OpInfo(
                name=name,
                type=draw(st.sampled_from(["MatMul", "Conv2D", "AddV2", "ReadVariableOp", "AssignSubVariableOp"])),
                inputs=inputs,
                output_shapes=[draw(shapes) for _ in range(n_out)],
                output_dtypes=[draw(st.sampled_from(["float32", "int32", "resource"])) for _ in range(n_out)],
                output_bytes=[draw(st.integers(0, 2**40)) for _ in range(n_out)],
                scope=name.rpartition("/")[0],
                phase=draw(st.sampled_from(PHASES)),
                flops=draw(st.integers(0, 2**50)),
                colocation=draw(st.lists(st.sampled_from(op_names), max_size=2)),
                attrs=draw(st.dictionaries(st.sampled_from(["strides", "padding", "equation"]), attr_values)),
            )
        )
        tensors += [f"{name}:{k}" for k in range(n_out)]
    var_names = draw(st.lists(names, min_size=1, max_size=5, unique=True))
    trainable = [True] + [draw(st.booleans()) for _ in var_names[1:]]
    weights = [v for v, t in zip(var_names, trainable) if t]
    variables = [
        VariableInfo(
            name=v,
            shape=draw(st.lists(st.integers(1, 1000), max_size=3)),
            dtype="float32",
            bytes=draw(st.integers(0, 2**40)),
            trainable=t,
            gradients=draw(st.lists(st.sampled_from(tensors), min_size=1, max_size=2)),
            sparse_gradient=draw(st.booleans()),
            sparse_update=draw(st.booleans()),
            update_ops=draw(st.lists(st.sampled_from(op_names), max_size=2)),
            slot_of=None if t else draw(st.one_of(st.none(), st.sampled_from(weights))),
            rows_touched=draw(st.one_of(st.none(), st.integers(0, 10**6))),
            model_weight=draw(st.booleans()),
        )
        for v, t in zip(var_names, trainable)
    ]
    job = JobInfo(
        model_name=draw(names),
        batch_size=draw(st.integers(1, 4096)),
        input_shapes=draw(st.dictionaries(names, dims, max_size=3)),
        optimizer=draw(st.sampled_from(["", "Adam", "SGD"])),
    )
    return GraphItem(ops, variables, job)


@settings(max_examples=30, deadline=None)
@given(graph_items())
def test_json_round_trip_is_lossless(item):
    text = json.dumps(item.to_dict())
    again = GraphItem.from_dict(json.loads(text))
    assert again == item
    assert again.content_hash() == item.content_hash()
    assert again.graph.number_of_edges() == item.graph.number_of_edges()
    assert again.ops_by_phase() == item.ops_by_phase()
