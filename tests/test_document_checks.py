"""Graphs and plans that break their invariants are refused on load: one line, exit 2, nothing written.

The documents are the real captured MLP (conftest's ``mlp_graph``) and real
plans of it (tests/test_plan_fixtures.py), each edited the way a hostile
user or another tool would.
"""

import json
import os

import pytest

from autodist.cli import main, placement_main
from autodist.errors import InputError
from autodist.graph.item import GraphItem
from autodist.plan import Plan
from tests.test_plan_fixtures import allreduce_rdma_plan, ps_plan  # noqa: F401  (fixtures)


def run_cli(entry, argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        entry(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


def _first_trainable(data):
    return next(i for i, v in enumerate(data["variables"]) if v["trainable"])


def _set(path, value):
    """An edit that sets ``data[path[0]][path[1]]... = value``."""

    def edit(data):
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


def _no_gradient(data):
    data["variables"][_first_trainable(data)]["gradients"] = []


def _cycle(data):
    data["ops"][0]["inputs"].append(f"^{data['ops'][-1]['name']}")


GRAPH_EDITS = {
    "negative shape": (_set(["ops", 3, "output_shapes", 0], [-5, 3]), "ops[3].output_shapes[0]: must be >= -1, got -5"),
    "negative bytes": (_set(["ops", 3, "output_bytes", 0], -4), "ops[3].output_bytes[0]: must be >= 0, got -4"),
    "duplicate op": (lambda d: d["ops"][1].__setitem__("name", d["ops"][0]["name"]), "ops[1].name: duplicate op name"),
    "input names no op": (_set(["ops", 5, "inputs"], ["ghost:0"]), "ops[5].inputs[0]: 'ghost:0' names no op of the graph"),
    "no variables": (_set(["variables"], []), "variables: the graph has no trainable variables"),
    "batch 0": (_set(["job", "batch_size"], 0), "job.batch_size: must be a positive batch size, got 0"),
    "absurd flops": (_set(["ops", 2, "flops"], 10**30), "ops[2].flops: op"),
    "no ops": (_set(["ops"], []), "ops: the graph has no ops"),
    "cycle": (_cycle, "ops: the graph has a cycle"),
    "flops not a number": (_set(["ops", 2, "flops"], "many"), "ops[2].flops: must be an integer, got 'many'"),
    "updated without gradient": (_no_gradient, "is updated but has no gradient"),
}


@pytest.fixture(scope="module")
def mlp_document(mlp_graph):
    return mlp_graph.to_dict()


def test_the_real_graph_holds_every_invariant(mlp_graph, embedding_graph):
    for item in (mlp_graph, embedding_graph):
        assert GraphItem.from_dict(json.loads(json.dumps(item.to_dict()))) == item


@pytest.mark.parametrize("case", sorted(GRAPH_EDITS))
def test_bad_graph_is_refused_before_planning(case, mlp_document, tmp_path, capsys):
    edit, expected = GRAPH_EDITS[case]
    data = json.loads(json.dumps(mlp_document))
    edit(data)
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(data))
    out_path = tmp_path / "plan.json"
    code, out, err = run_cli(main, ["plan", str(path), "--preset", "dgx-h100:2", "-o", str(out_path)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"autodist: error: {path}: ") and expected in err, err
    assert sorted(os.listdir(tmp_path)) == ["graph.json"]


def _duplicate_variable(data):
    data["variables"].append(dict(data["variables"][0]))


def _second_bucket(data):
    first, second = data["collectives"]["buckets"][:2]
    second["variables"].append(first["variables"][0])


def _shared_replica(data):
    replicas = data["strategy"]["replicas"]
    replicas[1] = list(replicas[0])


def _drop_variable(data):
    """Remove one variable everywhere a plan names it, as if the graph had one fewer."""
    name = data["variables"].pop(0)["name"]
    del data["strategy"]["sync"][name]
    for bucket in data["collectives"]["buckets"]:
        if name in bucket["variables"]:
            bucket["variables"].remove(name)


def _sync_key(data, key, value):
    name = sorted(data["strategy"]["sync"])[0]
    data["strategy"]["sync"][name][key] = value


PLAN_EDITS = {
    "variable synchronised twice": ("allreduce_rdma_plan", _duplicate_variable, "variables: variable"),
    "variable left out": ("allreduce_rdma_plan", _drop_variable, "variables: 3 variables, but the graph has 4 trainable ones"),
    "variable in two buckets": ("allreduce_rdma_plan", _second_bucket, "collectives.buckets[1].variables: variable"),
    "replicas share a device": ("allreduce_rdma_plan", _shared_replica, "replicas must be disjoint"),
    "unknown version": ("allreduce_rdma_plan", _set(["version"], 2), "version: unsupported plan version 2"),
    "bucket bytes": ("allreduce_rdma_plan", lambda d: d["collectives"]["buckets"][0].__setitem__("bytes", 1), "collectives.buckets[0].bytes"),
    "unknown sync method": ("allreduce_rdma_plan", lambda d: _sync_key(d, "method", "gossip"), "unknown method 'gossip'"),
    "bucket of the wrong type": ("allreduce_rdma_plan", lambda d: _sync_key(d, "bucket", "b"), "must be an integer >= 0, got 'b'"),
    "PS task out of range": ("ps_plan", lambda d: _sync_key(d, "ps_tasks", [7]), "must name 1 or more PS tasks from 0 to 1"),
    "device of another node": ("ps_plan", lambda d: d["tasks"][1]["devices"].__setitem__(0, "node-1/GPU:0"), "is not on the task's node"),
    "assignments disagree": ("ps_plan", lambda d: d["device_assignments"].pop(), "device_assignments: do not follow"),
}


@pytest.mark.parametrize("case", sorted(PLAN_EDITS))
def test_bad_plan_is_refused_by_report_and_emit(case, request, tmp_path, capsys):
    fixture, edit, expected = PLAN_EDITS[case]
    data = request.getfixturevalue(fixture).to_dict()
    edit(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    for entry, argv in ((placement_main, ["report", str(path)]), (main, ["emit", str(path), "-o", str(tmp_path / "k8s")])):
        code, out, err = run_cli(entry, argv, capsys)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert f": error: {path}: " in err and expected in err, err
    assert sorted(os.listdir(tmp_path)) == ["plan.json"]


def test_every_built_plan_holds_the_invariants(allreduce_rdma_plan, ps_plan):  # noqa: F811
    for plan in (allreduce_rdma_plan, ps_plan):
        assert Plan.from_dict(plan.to_dict()) == plan


def test_nan_in_a_document_is_refused(ps_plan, tmp_path):  # noqa: F811
    data = ps_plan.to_dict()
    data["prediction"]["step_time"] = float("nan")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="not valid JSON .NaN is not a JSON number"):
        Plan.load(path)


def test_validate_prints_ok_and_a_summary_of_each_kind(mlp_graph, allreduce_rdma_plan, tmp_path, capsys):  # noqa: F811
    from autodist.resource_spec import load_cluster

    graph, plan, spec = tmp_path / "graph.json", tmp_path / "plan.json", tmp_path / "spec.json"
    mlp_graph.save(graph)
    allreduce_rdma_plan.save(plan)
    spec.write_text(json.dumps(load_cluster(preset="dgx-h100:2").to_dict()))
    cluster_yaml = os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks", "clusters", "lab-mixed.yaml")
    expected = {
        graph: f"ok: {graph}: graph mlp: {len(mlp_graph.ops):,} ops, 4 trainable variables (2,762 parameters), batch size 16\n",
        plan: f"ok: {plan}: plan 'mlp': 4 variables; predicted step",
        spec: f"ok: {spec}: cluster 'dgx-h100:2': 2 nodes, 18 devices (16 GPUs)\n",
        cluster_yaml: f"ok: {cluster_yaml}: cluster 'lab-mixed': 4 nodes, 24 devices (20 GPUs)\n",
    }
    for path, line in expected.items():
        code, out, err = run_cli(main, ["validate", str(path)], capsys)
        assert code == 0 and err == "" and out.count("\n") == 1 and out.startswith(line), out


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"format": "autodist.report"}', "not an autodist document (format 'autodist.report'"),
        ("[1, 2]", "not an autodist document (format None"),
        ('{"format": "autodist.resource_spec", "version": 1, "nodes": [{"name": "a", "devices": [], "fabric": '
         '{"kind": "nvlink", "bandwidth": -1, "latency": 0}}]}', "nodes[0].devices: a node needs at least one device"),
    ],
)
def test_validate_names_the_first_problem(text, expected, tmp_path, capsys):
    path = tmp_path / "doc.json"
    path.write_text(text)
    code, out, err = run_cli(main, ["validate", str(path)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith(f"autodist: error: {path}: ") and expected in err, err


def test_validate_refuses_a_plan_edited_by_hand(allreduce_rdma_plan, tmp_path, capsys):  # noqa: F811
    data = allreduce_rdma_plan.to_dict()
    _second_bucket(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    code, out, err = run_cli(main, ["validate", str(path)], capsys)
    assert code == 2 and out == "" and "collectives.buckets[1].variables: variable" in err


MIXED_PRECISION_SCRIPT = """
import keras
import numpy as np

keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(np.zeros((32, 8), np.float32), np.zeros((32,), np.int32), batch_size=8, epochs=1)
"""


def test_a_mixed_precision_capture_holds_the_invariants(tmp_path):
    """Keras wraps the optimizer in a LossScaleOptimizer; the capture traces the optimizer it wraps, so every
    trainable variable has its gradient and update ops."""
    import keras

    from autodist.graph.capture import capture_script

    script = tmp_path / "mixed.py"
    script.write_text(MIXED_PRECISION_SCRIPT)
    try:
        item = capture_script(str(script))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert (item.job.optimizer, item.job.precision, item.job.dtype_policy) == ("SGD", "fp16", "mixed_float16")
    assert item.trainable_variables() and all(v.gradients and v.update_ops for v in item.trainable_variables())
    assert GraphItem.from_dict(json.loads(json.dumps(item.to_dict()))) == item


@pytest.mark.slow
def test_the_zoo_resnet50_holds_every_invariant(resnet50_graph):
    assert GraphItem.from_dict(json.loads(json.dumps(resnet50_graph.to_dict()))) == resnet50_graph
