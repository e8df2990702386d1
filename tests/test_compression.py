"""fp16/bf16 gradient compression per allreduce bucket: strategy field, plan JSON, pricing, search move, runtime.

Every graph is a real captured step (tests/conftest.py, benchmarks/models/run_small_mlp.py), priced by the
shipped cost model and the real simulator; the runtime tests train with TensorFlow, in this process (the
one-client runtime) and as two local replica processes on collective ops (`autodist run --plan`).
"""

import json
import random
import subprocess
import sys

import numpy as np
import pytest

from autodist.errors import InputError
from autodist.plan import Plan
from autodist.resource_spec import load_cluster
from autodist.resource_spec.cluster_file import cluster_from_dict
from autodist.strategy import COMPRESSIONS, Strategy, VarSync
from tests.plan_runs import run_plan, save_plan
from tests.test_run import BATCH, CLUSTER, REPLICAS, STEPS, reference_weights, small_job  # noqa: F401

NETWORK_BOUND = "cpu-2s-25g:2"  # two nodes over 25 GbE: the allreduce is most of the step


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


def _allreduce_all(graph_item, replicas, compression="none"):
    return Strategy(replicas=replicas, sync={
        v.name: VarSync("allreduce", algorithm="ring", bucket=0, compression=compression)
        for v in graph_item.trainable_variables()})


def _replicas(spec):
    return [[d.name] for d in spec.devices()]


# -- strategy field and plan JSON ------------------------------------------------------


def test_compression_round_trips_and_uncompressed_plans_keep_their_json(embedding_graph):
    spec = load_cluster(preset=NETWORK_BOUND)
    plain = _allreduce_all(embedding_graph, _replicas(spec))
    assert all("compression" not in s for s in plain.to_dict()["sync"].values())
    for compression in ("fp16", "bf16"):
        strategy = _allreduce_all(embedding_graph, _replicas(spec), compression)
        data = json.loads(json.dumps(strategy.to_dict()))
        assert {s["compression"] for s in data["sync"].values()} == {compression}
        assert Strategy.from_dict(data).sync == strategy.sync


def test_unknown_or_misplaced_compression_names_the_field(embedding_graph):
    spec = load_cluster(preset=NETWORK_BOUND)
    strategy = _allreduce_all(embedding_graph, _replicas(spec), "int8")
    name = sorted(strategy.sync)[0]
    variables = {v.name for v in embedding_graph.trainable_variables()}
    problems = dict(strategy.problems({d.name for d in spec.devices()}, variables))
    assert "unknown compression 'int8'" in problems[f"strategy.sync.{name}.compression"]
    strategy.sync[name] = VarSync("ps", ps_tasks=(0,), compression="fp16")
    strategy.ps_devices = [spec.devices()[0].name]
    problems = dict(strategy.problems({d.name for d in spec.devices()}, variables))
    assert "allreduced gradients only" in problems[f"strategy.sync.{name}.compression"]


def test_a_plan_file_with_a_bad_compression_is_one_line_exit_2(embedding_graph, tmp_path):
    spec = load_cluster(preset=NETWORK_BOUND)
    strategy = _allreduce_all(embedding_graph, _replicas(spec), "fp16")
    path = tmp_path / "plan.json"
    save_plan(embedding_graph, spec, strategy, path)
    assert Plan.load(str(path)).strategy.sync == strategy.sync
    data = json.loads(path.read_text())
    next(iter(data["strategy"]["sync"].values()))["compression"] = "fp8"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError):
        Plan.load(str(path))
    done = subprocess.run([sys.executable, "-m", "autodist", "validate", str(path)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "compression" in done.stderr and "fp8" in done.stderr


# -- simulator ---------------------------------------------------------------------------


def test_a_compressed_bucket_moves_half_the_bytes_after_a_priced_cast(resnet50_graph, cost_model):
    """(A dense model: a sparse gradient's rows are all-gathered, never cast.)"""
    from cost_models.comm import cast_seconds
    from placement import Problem, Simulator

    spec = load_cluster(preset=NETWORK_BOUND)
    sim = Simulator(Problem(resnet50_graph, spec, cost_model))
    assert not sim.problem.sparse_gradients
    plain = sim.simulate(_allreduce_all(resnet50_graph, _replicas(spec)), trace=True)
    results = {c: sim.simulate(_allreduce_all(resnet50_graph, _replicas(spec), c), trace=True)
               for c in ("fp16", "bf16")}
    dense = sum(sim.problem.dense_bytes.values())
    assert sum(sim.problem.compressed_bytes.values()) == dense // 2  # float32 variables: 2 of 4 bytes per element
    for compression, result in results.items():
        assert result.step_time < plain.step_time
        # Link occupancy is affine in bytes: half the bytes, a little over half the busy time.
        ratio = sum(result.link_busy.values()) / sum(plain.link_busy.values())
        assert 0.5 <= ratio < 0.6, ratio
        collective = [e for e in result.events if e[0] == f"allreduce ring bucket 0 {compression}"]
        update = [e for e in result.events if e[0] == "update bucket 0"]
        # The cast back runs between the collective's end and the update.
        cast = cast_seconds(dense, dense // 2, min(d.memory_bandwidth for d in spec.devices()))
        assert cast > 0
        assert min(e[3] for e in update) == pytest.approx(max(e[4] for e in collective) + cast, rel=1e-6)
    assert results["fp16"].step_time == pytest.approx(results["bf16"].step_time)


# -- search move -------------------------------------------------------------------------


def test_the_compression_move_changes_a_whole_bucket_and_only_when_allowed(embedding_graph, cost_model):
    from placement import Problem, Simulator
    from placement.space import StrategySpace

    spec = load_cluster(preset=NETWORK_BOUND)
    sim = Simulator(Problem(embedding_graph, spec, cost_model))
    strategy = _allreduce_all(embedding_graph, _replicas(spec))
    assert "compression" not in StrategySpace(sim.problem, random.Random(0)).applicable(strategy)
    space = StrategySpace(sim.problem, random.Random(0), compressions=COMPRESSIONS)
    assert "compression" in space.applicable(strategy)
    for _ in range(6):
        before = strategy.sync[sorted(strategy.sync)[0]].compression
        space._compression(strategy)
        values = {s.compression for s in strategy.sync.values()}
        assert len(values) == 1 and values != {before}  # one bucket: it changes as a whole


def test_search_compresses_a_network_bound_job_only_when_allowed(resnet50_graph, cost_model):
    from placement import optimize

    # Two nodes of four T4s behind a PCIe switch and 50 GbE: ResNet-50's 100 MB of dense gradients pay for their
    # allreduce only when it sends half the bytes.
    graph = resnet50_graph
    spec = cluster_from_dict({"name": "t4-switch", "nodes": [
        {"name": "node", "count": 2, "preset": "g4dn.12xlarge", "fabric": "pcie-gen3"}]}, source="test")
    kept = optimize(graph, spec, cost_model, seed=0, moves=300, allreduce_only=True)
    assert {s.compression for s in kept.strategy.sync.values()} == {"none"}
    found = optimize(graph, spec, cost_model, seed=0, moves=300, allreduce_only=True, allow_compression=True)
    assert {s.compression for s in found.strategy.sync.values()} & {"fp16", "bf16"}
    assert found.simulation.step_time < kept.simulation.step_time
    assert found.stats["accepted_by_move"].get("compression", 0) > 0


# -- runtime -----------------------------------------------------------------------------


def test_the_one_client_allreduce_sums_in_16_bits_and_returns_the_gradient_dtype():
    import tensorflow as tf

    from launcher.runtime.allreduce import allreduce

    rng = np.random.default_rng(1)
    values = [rng.standard_normal(11).astype(np.float32) for _ in range(3)]
    devices = ["/device:CPU:0"] * 3
    for compression, wire in (("fp16", tf.float16), ("bf16", tf.bfloat16)):
        @tf.function
        def summed():
            return allreduce([tf.constant(v) for v in values], devices, ["a", "a", "b"], "ring", compression)

        adds = [op for op in summed.get_concrete_function().graph.get_operations() if op.name.startswith("ring_reduce")]
        assert adds and {op.get_attr("T") for op in adds} == {wire}
        out = summed()
        assert all(t.dtype == tf.float32 for t in out)
        expected = np.sum([tf.cast(tf.cast(v, wire), tf.float32).numpy() for v in values], axis=0)
        for tensor in out:
            np.testing.assert_allclose(tensor.numpy(), expected, rtol=1e-2, atol=1e-2)
            assert not np.array_equal(tensor.numpy(), np.sum(values, axis=0))  # really rounded


# Per wire format, how close the weights after 4 Adam steps (lr 0.01) stay to float32 training on one process:
# float32 sums match to 1e-5 (tests/test_run.py); fp16 keeps 11 significant bits (measured: 3.5e-4 at most, every
# variable compressed), bf16 8 (7.0e-3).
TOLERANCE = {"none": 1e-5, "fp16": 1e-3, "bf16": 2e-2}


def _assert_close_to(trained, reference, compressions):
    """Every weight within the tolerance of the coarsest wire format (errors reach every layer through the loss)."""
    tolerance = max(TOLERANCE[c] for c in compressions)
    assert sorted(trained) == sorted(reference)
    for name, expected in reference.items():
        np.testing.assert_allclose(trained[name], expected, rtol=tolerance, atol=tolerance, err_msg=name)


def test_a_compressed_one_client_plan_trains_like_plain_keras(reference_weights):  # noqa: F811
    import io

    from run_small_mlp import build_model, make_data, trained_weights

    from launcher.runtime.fit import PlacedFit
    from launcher.runtime.layout import RunLayout, VariablePlacement

    cpu = "/job:localhost/replica:0/task:0/device:CPU:0"
    model = build_model(0)
    variables = {w.path: VariablePlacement(w.path, "allreduce", (cpu, cpu), bucket=i % 2,
                                           compression="fp16" if i % 2 else "none")
                 for i, w in enumerate(model.trainable_weights)}
    layout = RunLayout((cpu, cpu), ("n0", "n1"), variables, predicted_step_time=1e-3, plan_name="local")
    x, y = make_data(STEPS, BATCH, seed=0)
    with PlacedFit(layout, "local-plan.json", out=io.StringIO()):
        model.fit(x, y, batch_size=BATCH, shuffle=False)
    _assert_close_to(trained_weights(model), reference_weights, {v.compression for v in variables.values()})


@pytest.mark.slow
def test_a_compressed_collective_plan_trains_two_processes_like_one(small_job, reference_weights, tmp_path):  # noqa: F811
    spec = load_cluster(preset=CLUSTER)
    names = sorted(v.name for v in small_job.trainable_variables())
    # Bucket 0 (embedding, densified, and hidden) in fp16, bucket 1 (logits) in bf16.
    sync = {n: VarSync("allreduce", algorithm="ring", bucket=int(n.startswith("logits")),
                       compression="bf16" if n.startswith("logits") else "fp16",
                       sparse_sync="dense" if n.startswith("embedding") else "gather") for n in names}
    plan_path = save_plan(small_job, spec, Strategy(replicas=REPLICAS, sync=sync), tmp_path / "plan.json")
    done, record, weights = run_plan(plan_path, str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    sizes = {v.name: int(np.prod(v.shape)) for v in small_job.trainable_variables()}
    for replica in record["replicas"]:
        wire = {(c["bucket"], c["dtype"], c["compression"]): c for c in replica["collectives"]}
        assert sorted(wire) == [(0, "float16", "fp16"), (1, "bfloat16", "bf16")]
        for (bucket, _, _), collective in wire.items():
            members = [n for n in names if sync[n].bucket == bucket]
            assert sorted(collective["variables"]) == members
            assert collective["elements"] == sum(sizes[n] for n in members)
    _assert_close_to(weights, reference_weights, {s.compression for s in sync.values()})


def test_the_lower_bound_holds_for_compressed_plans(embedding_graph, cost_model):
    from placement import Problem, Simulator, lower_bound

    spec = load_cluster(preset=NETWORK_BOUND)
    sim = Simulator(Problem(embedding_graph, spec, cost_model))
    for compression in COMPRESSIONS:
        strategy = _allreduce_all(embedding_graph, _replicas(spec), compression)
        bound = lower_bound(sim.problem, replicas=strategy.replicas)
        assert bound <= sim.simulate(strategy).step_time
