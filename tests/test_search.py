"""Annealing search and baselines on real captured graphs with the shipped cost model."""

import json
import random

import pytest

from autodist.resource_spec import ResourceSpec, load_cluster
from cost_models.memory import live_peak, runtime_overhead_bytes
from cost_models.step_table import step_table
from placement import Problem, Simulator, baselines, lower_bound, optimize


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


def with_gpu_memory(spec, nbytes):
    """A copy of ``spec`` whose GPUs hold ``nbytes`` each."""
    tight = ResourceSpec.from_dict(spec.to_dict())
    for device in tight.gpus():
        device.memory_bytes = int(nbytes)
    return tight


def footprint(graph_item):
    """Forward outputs, live tensors at the peak, parameters, optimizer slots and a GPU's runtime reserve."""
    table = step_table(graph_item)
    params = graph_item.parameter_bytes()
    slots = sum(v.bytes for v in graph_item.slot_variables())
    activations = sum(op.total_output_bytes for op in graph_item.ops.values() if op.phase == "forward")
    return activations, live_peak(table), params, slots, runtime_overhead_bytes(table)


@pytest.mark.parametrize("preset", ["dgx-h100:2", "g4dn.12xlarge:2", "cpu-2s-25g:2"])
def test_search_is_never_worse_than_the_best_baseline(embedding_graph, cost_model, preset):
    spec = load_cluster(preset=preset)
    result = optimize(embedding_graph, spec, cost_model, seed=1, moves=100)
    best = min(c.simulation.step_time for c in result.candidates)
    assert {c.name for c in result.candidates} >= {"greedy-ps", "ring", "hierarchical", "parallax"}
    assert result.simulation.step_time <= best
    assert result.lower_bound <= result.simulation.step_time
    result.strategy.validate(embedding_graph, spec)
    assert result.stats["moves_tried"] > 0
    assert result.stats["moves_accepted"] <= result.stats["moves_tried"]


def test_allreduce_only_search_never_uses_a_parameter_server(embedding_graph, cost_model):
    spec = load_cluster(preset="cpu-2s-25g:2")
    free = optimize(embedding_graph, spec, cost_model, seed=1, moves=100)
    assert "greedy-ps" in {c.name for c in free.candidates}
    only = optimize(embedding_graph, spec, cost_model, seed=1, moves=100, allreduce_only=True)
    assert only.strategy.allreduces_everything() and not only.strategy.ps_devices
    assert {c.name.split("-node ")[-1] for c in only.candidates} == {"ring", "hierarchical"}
    assert only.stats["allreduce_only"] and not free.stats["allreduce_only"]
    assert only.stats["moves_tried"] > 0


def test_same_seed_and_moves_same_plan(mlp_graph, cost_model):
    spec = load_cluster(preset="g4dn.12xlarge:2")
    runs = [optimize(mlp_graph, spec, cost_model, seed=7, moves=150) for _ in range(2)]
    assert runs[0].stats["moves_tried"] == 150 and runs[0].stats["moves"] == 150
    assert json.dumps(runs[0].strategy.to_dict()) == json.dumps(runs[1].strategy.to_dict())
    assert runs[0].simulation.to_dict() == runs[1].simulation.to_dict()


def test_progress_reports_fraction_and_best_time(mlp_graph, cost_model):
    spec = load_cluster(preset="dgx-h100:1")
    seen = []
    result = optimize(mlp_graph, spec, cost_model, moves=60, progress=lambda f, t: seen.append((f, t)))
    fractions = [f for f, _ in seen]
    assert len(seen) > 2 and fractions == sorted(fractions) and fractions[-1] == 1.0
    assert seen[-1][1] == pytest.approx(result.simulation.step_time)


def test_search_respects_memory_when_allreduce_does_not_fit(mlp_graph, cost_model):
    _, live, params, slots, reserve = footprint(mlp_graph)
    # allreduce keeps weights and slots on every GPU; PS a copy of the weights
    spec = with_gpu_memory(load_cluster(preset="g4dn.12xlarge:2"), reserve + live + 2 * params)
    result = optimize(mlp_graph, spec, cost_model, seed=0, budget_s=0.2)
    fits = {c.name: c.simulation.fits for c in result.candidates}
    assert fits["greedy-ps"] and not fits["ring"] and not fits["hierarchical"]
    assert result.simulation.fits
    for device, used in result.simulation.memory.items():
        assert used <= spec.device(device).memory_bytes


def test_greedy_op_placer_splits_a_model_that_fits_no_device(mlp_graph, cost_model):
    _, live, params, _, reserve = footprint(mlp_graph)
    spec = with_gpu_memory(load_cluster(preset="g4dn.12xlarge:2"), reserve + (live + params) * 0.9)
    result = optimize(mlp_graph, spec, cost_model, seed=0, budget_s=0.2)
    names = [c.name for c in result.candidates]
    assert "greedy-op-placer" in names
    placer = result.baseline("greedy-op-placer")
    assert len(placer.strategy.replicas) == 2 and len(placer.strategy.replicas[0]) == 4
    assert len(set(placer.strategy.group_slots.values())) > 1
    assert placer.simulation.fits and result.simulation.fits
    assert result.simulation.step_time <= placer.simulation.step_time


def test_greedy_ps_balances_bytes_over_one_ps_per_node(embedding_graph, cost_model):
    spec = load_cluster(preset="g4dn.12xlarge:2")
    sim = Simulator(Problem(embedding_graph, spec, cost_model))
    strategy = baselines.greedy_ps(sim.problem)
    assert strategy.ps_devices == baselines.ps_candidates(spec) and len(strategy.ps_devices) == 2
    tasks = [s.ps_tasks for s in strategy.sync.values()]
    assert all(len(t) == 1 for t in tasks) and {t[0] for t in tasks} == {0, 1}


def test_lower_bound_holds_for_every_baseline(embedding_graph, cost_model):
    spec = load_cluster(preset="dgx-h100:2")
    sim = Simulator(Problem(embedding_graph, spec, cost_model))
    for candidate in baselines.all_baselines(sim):
        s = candidate.strategy
        bound = lower_bound(sim.problem, s.replicas, s.group_slots)
        assert 0 < bound <= candidate.simulation.step_time


def test_a_cluster_without_compute_devices_is_a_placement_error(mlp_graph, cost_model):
    from autodist.errors import PlacementError

    with pytest.raises(PlacementError, match="'empty' has no compute device"):
        optimize(mlp_graph, ResourceSpec([], name="empty"), cost_model, budget_s=0.1)


@pytest.mark.slow
def test_resnet50_on_4x8_a100_groups_overlap_and_beats_greedy_ps(resnet50_graph, cost_model):
    spec = load_cluster(preset="dgx-a100:4")
    result = optimize(resnet50_graph, spec, cost_model, seed=0, budget_s=1.0)
    sim = Simulator(Problem(resnet50_graph, spec, cost_model))
    ready = sim._share(result.strategy)._schedule(result.strategy.replicas[0], (), False, 1).gradient_ready
    assert len(set(ready.values())) > 50  # gradients become ready all through backward
    best = min(c.simulation.step_time for c in result.candidates)
    assert result.lower_bound <= result.simulation.step_time <= best
    assert result.simulation.step_time < result.baseline("greedy-ps").simulation.step_time


def test_the_plan_records_which_budget_the_search_had_and_its_moves(mlp_graph, cost_model):
    from autodist.plan import Plan

    spec = load_cluster(preset="dgx-h100:2")
    by_clock = optimize(mlp_graph, spec, cost_model, seed=0, budget_s=0.2)
    by_moves = optimize(mlp_graph, spec, cost_model, seed=0, moves=30)
    clock = Plan.build(mlp_graph, spec, by_clock, cost_model.id, 0).provenance["search"]
    assert clock == {"budget_s": 0.2, "moves": None, "moves_made": by_clock.stats["moves_tried"]}
    assert Plan.build(mlp_graph, spec, by_moves, cost_model.id, 0).provenance["search"] == {
        "budget_s": None, "moves": 30, "moves_made": 30}
    assert by_moves.stats["evaluations"] > by_moves.stats["moves_tried"]  # the start and calibration samples too


def test_the_search_offers_an_algorithm_only_where_it_runs_differently(mlp_graph, cost_model):
    """On collective ops every algorithm runs as its stages (launcher.runtime.collective): on one node (or one
    replica per node) master and hierarchical are the ring, so no move offers them and the plan names the ring;
    on two nodes of 8 GPUs all three are real choices, priced apart."""
    from placement.space import StrategySpace

    one_node = Problem(mlp_graph, load_cluster(preset="p3.16xlarge"), cost_model)
    two_nodes = Problem(mlp_graph, load_cluster(preset="p3.16xlarge:2"), cost_model)
    for problem, offered in ((one_node, ("ring",)), (two_nodes, ("ring", "hierarchical", "master"))):
        space = StrategySpace(problem, random.Random(0), allow_ps=False)
        start = baselines.data_parallel(problem)
        assert space.algorithms(start.replicas) == offered
        assert ("algorithm" in space.applicable(start)) == (len(offered) > 1)
    result = optimize(mlp_graph, load_cluster(preset="p3.16xlarge"), cost_model, seed=0, moves=300,
                      allreduce_only=True)
    assert {s.algorithm for s in result.strategy.sync.values()} == {"ring"}
    simulator = Simulator(two_nodes)
    times = {a: simulator.simulate(baselines.data_parallel(two_nodes, algorithm=a)).step_time
             for a in ("ring", "hierarchical", "master")}
    assert len(set(times.values())) == 3


def test_buckets_that_only_their_algorithm_told_apart_stay_two_collectives_in_the_plan(mlp_graph, cost_model):
    """A move can leave one bucket number under two algorithms: two collectives as the search priced them.
    Naming both a ring must not merge them into one collective that the search never priced."""
    from placement.search import _named_as_run
    from autodist.strategy import Strategy, VarSync

    problem = Problem(mlp_graph, load_cluster(preset="dgx-h100:2"), cost_model)
    names = problem.ready_order
    one_node = [[f"node-0/GPU:{i}"] for i in range(8)]  # where hierarchical runs as the ring
    split = Strategy(one_node, {name: VarSync("allreduce", algorithm="ring" if i % 2 else "hierarchical",
                                              bucket=0) for i, name in enumerate(names)})
    named = _named_as_run(split, problem.resource_spec)
    assert {s.algorithm for s in named.sync.values()} == {"ring"}
    assert len({s.bucket for s in named.sync.values()}) == 2
    simulator = Simulator(problem)
    assert simulator.simulate(named).step_time == pytest.approx(simulator.simulate(split).step_time, rel=1e-12)


@pytest.mark.parametrize("preset", ["cpu-2s-25g:4", "dgx-h100:2"])
def test_what_a_step_takes_at_least_before_its_pulls_is_at_most_its_step(embedding_graph, cost_model, preset):
    """The time a one-client plan's step takes at least, given before its pulls run (Simulator.simulate's
    give_up), never exceeds its step time, and giving up there returns no result."""
    from placement.space import StrategySpace, copy_strategy

    problem = Problem(embedding_graph, load_cluster(preset=preset), cost_model)
    simulator = Simulator(problem)
    space, walk = StrategySpace(problem, random.Random(5)), random.Random(9)
    current, bounded = baselines.greedy_ps(problem), 0
    for _ in range(60):
        candidate = copy_strategy(current)
        space.move(candidate)
        seen = []
        step = simulator.simulate(candidate, give_up=lambda at_least: seen.append(at_least) or False).step_time
        assert all(at_least <= step for at_least in seen)
        assert (simulator.simulate(candidate, give_up=lambda at_least: True) is None) == bool(seen)
        bounded += bool(seen)
        if walk.random() < 0.5:
            current = candidate
    assert bounded, "no one-client plan was visited"


def test_moves_rejected_before_their_pulls_make_the_search_of_full_simulations(embedding_graph, cost_model,
                                                                                monkeypatch):
    """A move whose step already takes too long before its pulls is rejected there, with the same draw a full
    simulation would be judged by: the search walks and returns what it does when every move is simulated in
    full (the Simulator below runs each simulation, given up or not)."""
    spec = load_cluster(preset="cpu-2s-25g:4")
    gave_up, simulate = [], Simulator.simulate

    def counted(self, strategy, trace=False, overlap=True, give_up=None):
        result = simulate(self, strategy, trace, overlap, give_up)
        gave_up.append(result is None)
        return result

    monkeypatch.setattr(Simulator, "simulate", counted)
    early = optimize(embedding_graph, spec, cost_model, seed=2, moves=600)
    assert any(gave_up), "no move was rejected before its pulls"

    def in_full(self, strategy, trace=False, overlap=True, give_up=None):
        return simulate(self, strategy, trace, overlap)

    monkeypatch.setattr(Simulator, "simulate", in_full)
    full = optimize(embedding_graph, spec, cost_model, seed=2, moves=600)
    assert early.strategy == full.strategy
    assert early.simulation.step_time == full.simulation.step_time
    for key in ("moves_tried", "moves_accepted", "acceptance_start", "acceptance_end", "accepted_by_move"):
        assert early.stats[key] == full.stats[key]
