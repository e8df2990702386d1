"""Incremental evaluation: a Simulator reused along a search, each move evaluated from the one before, gives what
a fresh one gives and what a full evaluation (Simulator(incremental=False)) gives."""

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
    import placement.simulator.run

    monkeypatch.setattr(placement.simulator.run, "MAX_PLANS", 3)
    test_a_walk_of_accepted_and_rejected_moves_equals_fresh_simulations(mlp_graph, embedding_graph, cost_model,
                                                                          "cpu-2s-25g:4", "embedding", "greedy_ps")


def test_allreduce_phases_from_the_fit_equal_the_comm_models_at_every_size(mlp_graph, cost_model):
    """Over several nodes NCCL takes its tree for small buckets and its ring for large ones: the Problem prices
    that from a fit of two pieces, which gives the CommModel's phases at every size, around the switch too."""
    problem = Problem(mlp_graph, load_cluster(preset="dgx-h100:4"), cost_model)
    devices = tuple(d.name for d in problem.resource_spec.compute_devices())
    comm = problem.comm
    sizes = sorted({int(1.37 ** k) for k in range(80)} | {0})
    for nbytes in sizes:
        fitted = problem.prices.allreduce_phases(devices, "ring", nbytes, collective_ops=True)
        exact = comm.allreduce_phases(nbytes, list(devices), "ring", collective_ops=True)
        assert [p.links for p in fitted] == [p.links for p in exact]
        assert [p.seconds for p in fitted] == pytest.approx([p.seconds for p in exact], rel=1e-9, abs=0)
    pieces = problem.prices._affine_fits[("ar", devices, "ring", True, False)]  # on collective ops, not Horovod's
    assert len(pieces) == 2  # the tree's and the ring's, not a price asked of the CommModel at every size


@pytest.mark.parametrize("start", ["greedy_ps", "greedy_op_placer"])
def test_what_a_move_changes_names_the_candidate_exactly(mlp_graph, embedding_graph, cost_model, start):
    """The search keeps the scores of the candidates tried from one strategy by what they change
    (placement.search.changes): no change exactly when the candidate equals the strategy, and two candidates
    of one strategy with the same changes are the same strategy."""
    from placement.search import changes

    spec = load_cluster(preset="dgx-h100:4")
    for graph in (mlp_graph, embedding_graph):
        problem = Problem(graph, spec, cost_model)
        rng = random.Random(3)
        space = StrategySpace(problem, rng, compressions=COMPRESSIONS, allow_micro_batches=True)
        current = getattr(baselines, start)(problem)
        for _ in range(10):
            tried = {}
            for _ in range(30):
                candidate = copy_strategy(current)
                space.move(candidate)
                change = changes(current, candidate)
                assert (not change) == (candidate == current)
                assert tried.setdefault(change, candidate) == candidate
            current = candidate


def test_memory_reused_across_micro_batches_of_one_part_size_equals_fresh(mlp_graph, cost_model):
    """Where one replica's slice is a single row, one and two micro-batches simulate the same part (the same
    batch share), yet two keep a gradient buffer: the Simulator's memory cache tells them apart."""
    spec = load_cluster(preset="dgx-h100:2")
    reused = Simulator(Problem(mlp_graph, spec, cost_model))
    strategy = baselines.data_parallel(reused.problem)
    assert len(strategy.replicas) == mlp_graph.job.batch_size  # a row per replica
    one = reused.simulate(strategy)
    strategy.micro_batches = 2
    two = reused.simulate(strategy)
    assert_same(two, Simulator(Problem(mlp_graph, spec, cost_model)).simulate(strategy))
    assert all(two.memory[d] > one.memory[d] for d in one.memory)


MOVES_PER_WALK = 100
WALKS = 13  # per (model, cluster): 4 x 13 x 100 = 5,200 moves


def _exactly(result, busy=False):
    """What a simulation shows, to the bit; with ``busy``, every link's and device's busy seconds too."""
    return (result.step_time, result.compute_time, result.exposed_comm_time, result.client_time, result.cpu_bound,
            result.memory) + ((dict(result.link_busy), dict(result.device_busy)) if busy else ())


@pytest.mark.parametrize("model, preset", [("mlp", "dgx-h100:4"), ("embedding", "cpu-2s-25g:4"),
                                           ("cnn", "p3.16xlarge:2"), ("embedding", "emu-1gbit:2")])
def test_thousands_of_random_moves_evaluated_incrementally_equal_full_evaluations(
        mlp_graph, embedding_graph, cnn_graph, cost_model, model, preset):
    """Hypothesis walks of the search's moves (each candidate kept or dropped at random, as the annealer does):
    the Simulator reused along the walk, with every cache a move can hit and each move evaluated from the one
    before it (the lowering's delta, the collective stream re-run from its first change), gives to the bit
    what a full evaluation by a Simulator that has seen nothing gives, busy times included (over one Problem,
    whose prices are pure functions of their inputs)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    graph = {"mlp": mlp_graph, "embedding": embedding_graph, "cnn": cnn_graph}[model]
    problem = Problem(graph, load_cluster(preset=preset), cost_model)
    moves = []

    @settings(max_examples=WALKS, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(seed=st.integers(0, 10**6), start=st.sampled_from(["greedy-ps", "ring", "parallax", "greedy-op-placer"]))
    def walk(seed, start):
        rng = random.Random(seed)
        reused = Simulator(problem)
        space = StrategySpace(problem, rng, compressions=COMPRESSIONS, allow_micro_batches=True)
        current = (baselines.greedy_op_placer(problem) if start == "greedy-op-placer"
                   else baselines.named(start).build(problem))
        for step in range(MOVES_PER_WALK):
            candidate = copy_strategy(current)
            space.move(candidate)
            moves.append(1)
            busy = step % 10 == 0
            assert _exactly(reused.simulate(candidate, trace=step % 25 == 0), busy) == _exactly(
                Simulator(problem, incremental=False).simulate(candidate), busy)
            if rng.random() < 0.5:
                current = candidate

    walk()
    assert len(moves) >= WALKS * MOVES_PER_WALK


def test_a_move_reruns_a_collective_stream_only_from_the_collective_it_changed(cnn_graph, cost_model):
    """On collective ops, a move that changes one collective re-runs the stream from that collective (in
    ready order): the state logged before each earlier one is kept, not computed again; the step is the
    full evaluation's."""
    from dataclasses import replace

    problem = Problem(cnn_graph, load_cluster(preset="dgx-h100:2"), cost_model)
    simulator = Simulator(problem)
    strategy = baselines.named("ring").build(problem)
    strategy.sync = {n: replace(s, bucket=i) for i, (n, s) in enumerate(sorted(strategy.sync.items()))}
    simulator.simulate(strategy)
    share = simulator._share(strategy)  # the Simulator of one replica's part of the batch, which ran it
    before = share.stream_log
    assert len(before.order) >= 4
    collective_of = {id(plan): c for c, _, plan in share.collective_plans.values()}
    buckets = [i for i, plan in enumerate(before.order) if id(plan) in collective_of]  # not the outputs' average
    k = buckets[len(buckets) // 2]
    name = collective_of[id(before.order[k])].variables[0]
    moved = copy_strategy(strategy)
    moved.sync[name] = replace(strategy.sync[name], algorithm="master")
    result = simulator.simulate(moved)
    after = share.stream_log
    kept = sum(a is b for a, b in zip(before.states, after.states))
    assert kept == k
    assert _exactly(result, busy=True) == _exactly(Simulator(problem, incremental=False).simulate(moved), busy=True)
