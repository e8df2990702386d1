"""Incremental evaluation: a Simulator reused along a search gives what a fresh one gives, to 1e-12."""

import random

import pytest

from autodist.resource_spec import load_cluster
from autodist.strategy import COMPRESSIONS
from placement import Problem, Simulator, baselines
from placement.space import StrategySpace, copy_strategy

RELATIVE = 1e-12


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


def assert_same(reused, fresh):
    assert reused.step_time == pytest.approx(fresh.step_time, rel=RELATIVE, abs=0)
    assert reused.compute_time == pytest.approx(fresh.compute_time, rel=RELATIVE, abs=0)
    assert reused.memory == fresh.memory
    assert reused.client_time == fresh.client_time


@pytest.mark.parametrize("preset", ["dgx-h100:4", "cpu-2s-25g:4"])
@pytest.mark.parametrize("model", ["mlp", "embedding"])
@pytest.mark.parametrize("start", ["greedy_ps", "greedy_op_placer"])
def test_a_walk_of_accepted_and_rejected_moves_equals_fresh_simulations(mlp_graph, embedding_graph, cost_model,
                                                                          preset, model, start):
    """Like the annealer: each move is tried on a copy of the current strategy, half of them kept; the
    Simulator keeps its caches (schedules, bucket and shard plans, link sets) over every move, replica
    counts, micro-batches, wire formats and op groups moved between a model-parallel replica's devices included,
    and traced runs in between."""
    graph = {"mlp": mlp_graph, "embedding": embedding_graph}[model]
    spec = load_cluster(preset=preset)
    reused = Simulator(Problem(graph, spec, cost_model))
    rng = random.Random(7)
    space = StrategySpace(reused.problem, rng, compressions=COMPRESSIONS, allow_micro_batches=True)
    current = getattr(baselines, start)(reused.problem)
    for step in range(20):
        candidate = copy_strategy(current)
        space.move(candidate)
        fresh = Simulator(Problem(graph, spec, cost_model)).simulate(candidate)
        assert_same(reused.simulate(candidate, trace=step % 5 == 0), fresh)
        if rng.random() < 0.5:
            current = candidate
    assert_same(reused.simulate(current), Simulator(Problem(graph, spec, cost_model)).simulate(current))


def test_a_simulator_that_forgets_its_plans_still_equals_fresh_ones(mlp_graph, embedding_graph, cost_model,
                                                                    monkeypatch):
    """Past MAX_PLANS bucket and shard plans the Simulator drops them all and prices them again."""
    import placement.simulator

    monkeypatch.setattr(placement.simulator, "MAX_PLANS", 3)
    test_a_walk_of_accepted_and_rejected_moves_equals_fresh_simulations(mlp_graph, embedding_graph, cost_model,
                                                                          "cpu-2s-25g:4", "embedding", "greedy_ps")
