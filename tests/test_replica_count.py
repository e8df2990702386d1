"""Fewer replicas than devices: the search move that adds or removes a replica, and the runtime using only the
replicas' devices.

Graphs are real captured steps (tests/conftest.py, benchmarks/models/run_small_mlp.py) priced by the shipped cost
model and the real simulator; the runtime test starts real TensorFlow processes on localhost (`autodist run --plan`).
"""

import random

import numpy as np
import pytest

from autodist.plan import Plan
from autodist.resource_spec import load_cluster
from autodist.strategy import Strategy, VarSync
from tests.conftest import build_embedding_step
from tests.plan_runs import run_plan, save_plan
from tests.test_run import reference_weights, small_job  # noqa: F401

NETWORK_BOUND = "cpu-2s-25g:4"  # four nodes over 25 GbE, one replica device each


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


@pytest.fixture(scope="module")
def wide_embedding_graph():
    """A 100,000-row embedding: allreducing its 6.4 MB gradient over 25 GbE takes far longer than the step."""
    from autodist.graph.capture import capture_step

    step, ids, y, _ = build_embedding_step(rows=100_000)
    return capture_step(step, ids, y, model_name="wide_embedding")


def test_the_replica_move_keeps_the_first_devices_in_cluster_order(wide_embedding_graph, cost_model):
    from placement import Problem, Simulator, baselines
    from placement.space import StrategySpace

    spec = load_cluster(preset=NETWORK_BOUND)
    sim = Simulator(Problem(wide_embedding_graph, spec, cost_model))
    strategy = baselines.data_parallel(sim.problem)
    devices = [[d.name] for d in spec.compute_devices()]
    assert strategy.replicas == devices and len(devices) > 2
    space = StrategySpace(sim.problem, random.Random(0))
    assert "replicas" in space.applicable(strategy)
    counts = set()
    for _ in range(30):
        space._replicas(strategy)
        assert strategy.replicas == devices[:len(strategy.replicas)]
        counts.add(len(strategy.replicas))
    assert counts == set(range(1, len(devices) + 1))


def test_search_drops_replicas_whose_allreduce_costs_more_than_they_compute(wide_embedding_graph, cost_model):
    from placement import baselines, optimize

    spec = load_cluster(preset=NETWORK_BOUND)
    result = optimize(wide_embedding_graph, spec, cost_model, seed=0, budget_s=0.3, allreduce_only=True)
    devices = len(spec.compute_devices())
    everywhere = [c for c in result.candidates if c.name in baselines.BASELINE_NAMES]
    assert everywhere and all(len(c.strategy.replicas) == devices for c in everywhere)
    assert len(result.strategy.replicas) < devices
    assert result.simulation.step_time < min(c.simulation.step_time for c in everywhere)
    assert result.simulation.step_time <= min(c.simulation.step_time for c in result.candidates)
    assert result.stats["accepted_by_move"].get("replicas", 0) > 0


def test_a_baseline_faster_on_fewer_whole_nodes_joins_at_its_fastest_scale(wide_embedding_graph, cost_model):
    """On 4 one-device nodes over 25 GbE the embedding's allreduce costs more than a replica computes: ring is
    faster on one node than on 2 or 4, and "1-node ring" joins the baselines with the first node's device."""
    from placement import Problem, Simulator, baselines

    spec = load_cluster(preset=NETWORK_BOUND)
    sim = Simulator(Problem(wide_embedding_graph, spec, cost_model))
    assert baselines.node_scales(spec) == [1, 2, 4]
    candidates = {c.name: c for c in baselines.all_baselines(sim)}
    ring = [sim.simulate(baselines.data_parallel(sim.problem, nodes=k)).step_time for k in (1, 2, 4)]
    assert ring[0] < ring[1] < ring[2]
    scaled = candidates["1-node ring"]
    assert scaled.strategy.replicas == [[spec.compute_devices()[0].name]]
    assert scaled.simulation.step_time == ring[0] < candidates["ring"].simulation.step_time
    assert "2-node ring" not in candidates


def test_no_scaled_baseline_joins_on_one_node(wide_embedding_graph, cost_model):
    """On a cluster of one node the baselines are the named strategies on every device."""
    from placement import Problem, Simulator, baselines

    for preset in ("dgx-h100:1", "cpu-2s-25g:1"):
        sim = Simulator(Problem(wide_embedding_graph, load_cluster(preset=preset), cost_model))
        assert baselines.node_scales(sim.problem.resource_spec) == [1]
        assert {c.name for c in baselines.all_baselines(sim)} <= set(baselines.BASELINE_NAMES) | {"greedy-op-placer"}


def test_one_move_already_returns_one_replica_where_training_undistributed_is_fastest(wide_embedding_graph,
                                                                                       cost_model, tmp_path):
    """One replica is evaluated before the first round: a search too short to walk there still returns it.  One
    node of two CPU devices over a 100 Mb/s fabric: every baseline runs two replicas (the node is one scale)."""
    from placement import optimize

    cluster = tmp_path / "slow.yaml"
    cluster.write_text("nodes: [{name: a, cpus: {model: cpu-local, count: 2}, "
                       "fabric: {kind: ethernet, speed: 100 Mb/s}}]\n")
    spec = load_cluster(path=str(cluster))
    result = optimize(wide_embedding_graph, spec, cost_model, seed=0, moves=1)
    assert all(len(c.strategy.replicas) == 2 for c in result.candidates)
    assert len(result.strategy.replicas) == 1
    single = result.simulation.step_time
    assert all(single < c.simulation.step_time for c in result.candidates)


@pytest.mark.slow
def test_a_plan_on_two_of_three_devices_runs_two_processes_and_trains_like_one(small_job, reference_weights,  # noqa: F811
                                                                              tmp_path):
    spec = load_cluster(preset="cpu-local:3")
    replicas = [["local-0/CPU:0"], ["local-2/CPU:0"]]
    strategy = Strategy(replicas=replicas, sync={v.name: VarSync("allreduce") for v in small_job.trainable_variables()})
    plan_path = save_plan(small_job, spec, strategy, tmp_path / "plan.json")
    assert [t["devices"] for t in Plan.load(plan_path).tasks_of("worker")] == replicas
    done, record, trained = run_plan(plan_path, str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "replica 0 of 2 serving" in done.stdout
    assert [r["replica"] for r in record["replicas"]] == [0, 1]
    assert all(c["group_size"] == 2 for r in record["replicas"] for c in r["collectives"])
    for name, expected in reference_weights.items():
        np.testing.assert_allclose(trained[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)
