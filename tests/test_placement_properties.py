"""Hypothesis properties of strategies reached by random moves, on real captured graphs."""

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autodist.resource_spec import ResourceSpec, load_cluster
from placement import Problem, Simulator, baselines, lower_bound, optimize
from placement.grouping import group_ops
from placement.space import StrategySpace, copy_strategy

PRESETS = ["dgx-h100:2", "g4dn.12xlarge:2", "p3.16xlarge:2", "cpu-2s-25g:3"]
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


@pytest.fixture(scope="module")
def simulators(embedding_graph, mlp_graph, cost_model):
    sims = {}
    for preset in PRESETS:
        spec = load_cluster(preset=preset)
        for graph in (embedding_graph, mlp_graph):
            sims[(preset, graph.job.model_name)] = Simulator(Problem(graph, spec, cost_model))
    return sims


def random_strategy(sim, seed, moves, model_parallel):
    rng = random.Random(seed)
    space = StrategySpace(sim.problem, rng)
    build = baselines.greedy_op_placer if model_parallel else rng.choice(baselines.BASELINES).build
    start = build(sim.problem)
    strategy = copy_strategy(start)
    for _ in range(moves):
        space.move(strategy)
    return strategy


@SETTINGS
@given(
    key=st.sampled_from([(p, m) for p in PRESETS for m in ("embedding", "mlp")]),
    seed=st.integers(0, 2**16),
    moves=st.integers(0, 60),
    model_parallel=st.booleans(),
)
def test_random_moves_keep_strategies_valid_and_above_the_bound(simulators, key, seed, moves, model_parallel):
    sim = simulators[key]
    strategy = random_strategy(sim, seed, moves, model_parallel)
    strategy.validate(sim.problem.graph_item, sim.problem.resource_spec)
    trainable = sorted(v.name for v in sim.problem.graph_item.trainable_variables())
    assert sorted(strategy.sync) == trainable  # every variable assigned exactly once
    for name, s in strategy.sync.items():
        if s.method == "ps":
            assert len(set(s.ps_tasks)) == len(s.ps_tasks) <= len(strategy.ps_devices)
    result = sim.simulate(strategy)
    bound = lower_bound(sim.problem, strategy.replicas, strategy.group_slots)
    assert result.step_time >= bound * (1 - 1e-12)
    assert result.compute_time <= result.step_time


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    preset=st.sampled_from(PRESETS + ["dgx-h100:4"]),
    model=st.sampled_from(["embedding", "mlp"]),
    seed=st.integers(0, 2**16),
    moves=st.integers(1, 25),
)
def test_a_reused_simulator_equals_a_fresh_one_along_random_moves(simulators, mlp_graph, embedding_graph, cost_model,
                                                                   preset, model, seed, moves):
    """Incremental evaluation: a Simulator that evaluated every strategy of a random walk (its schedules, phase
    lists and wide link sets cached) gives, at every step, what a new Simulator of a new Problem gives."""
    graph = {"mlp": mlp_graph, "embedding": embedding_graph}[model]
    spec = load_cluster(preset=preset)
    reused = simulators.get((preset, model)) or Simulator(Problem(graph, spec, cost_model))
    space = StrategySpace(reused.problem, random.Random(seed))
    strategy = random.Random(seed).choice(baselines.BASELINES).build(reused.problem)
    for _ in range(moves):
        strategy = copy_strategy(strategy)
        space.move(strategy)
        fresh = Simulator(Problem(graph, spec, cost_model)).simulate(strategy)
        assert reused.simulate(strategy).to_dict() == fresh.to_dict()


def reference_occupy(intervals, links, ready, seconds):
    """Link by link, the first window of ``seconds`` from ``ready`` free on every link of ``links``; every link
    keeps the union of its reservations; a phase of no occupancy holds no link and waits for none."""
    start = ready
    if seconds == 0:
        return start, start
    while True:
        blocking = [end for link in links for begin, end in intervals.get(link, ())
                    if begin < start + seconds and end > start]
        if not blocking:
            break
        start = max(blocking)
    for link in links:
        if seconds > 0:
            merged = []
            for begin, end in sorted(intervals.get(link, []) + [(start, start + seconds)]):
                if merged and begin <= merged[-1][1]:
                    merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
                else:
                    merged.append((begin, end))
            intervals[link] = merged
    return start, start + seconds


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 40), st.integers(0, 8), st.integers(0, 20)),
                min_size=1, max_size=40))
def test_wide_phases_find_the_windows_links_find(requests):
    """The link queue's wide link sets (one interval list per collective) find the same windows as a queue that
    keeps every link's intervals, whatever mix of wide and narrow phases arrives."""
    from placement.simulator.links import WIDE_PHASE, LinkQueue

    link_sets = [tuple(f"l{i}" for i in range(k * 5, k * 5 + WIDE_PHASE)) for k in range(3)]  # overlapping wide sets
    queue, reference = LinkQueue(), {}
    for kind, first, ready, seconds in requests:
        links = link_sets[kind] if kind < 3 else (f"l{first}", f"l{(first * 7) % 41}")
        links = tuple(dict.fromkeys(links))
        assert queue.occupy(links, float(ready), float(seconds)) == reference_occupy(reference, links, ready, seconds)
    busy = queue.link_busy()
    for link, spans in reference.items():
        assert busy[link] == pytest.approx(sum(b - a for a, b in spans))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(preset=st.sampled_from(PRESETS), seed=st.integers(0, 1000), squeeze=st.sampled_from([None, 0.9, 1.2]))
def test_search_plans_fit_memory_and_repeat_with_the_seed(embedding_graph, cost_model, preset, seed, squeeze):
    spec = load_cluster(preset=preset)
    if squeeze is not None and spec.gpus():
        activations = sum(op.total_output_bytes for op in embedding_graph.ops.values() if op.phase == "forward")
        spec = ResourceSpec.from_dict(spec.to_dict())
        for device in spec.gpus():
            device.memory_bytes = int((activations + embedding_graph.parameter_bytes()) * squeeze)
    first = optimize(embedding_graph, spec, cost_model, seed=seed, moves=40)
    again = optimize(embedding_graph, spec, cost_model, seed=seed, moves=40)
    assert first.strategy.to_dict() == again.strategy.to_dict()
    if any(c.simulation.fits for c in first.candidates):
        assert first.simulation.fits
        assert all(first.simulation.memory[d] <= spec.device(d).memory_bytes for d in first.simulation.memory)
    assert first.simulation.step_time >= first.lower_bound


@pytest.mark.parametrize("fixture", ["mlp_graph", "embedding_graph"])
def test_groups_form_a_dag_that_covers_every_op_once(request, fixture):
    graph = request.getfixturevalue(fixture)
    groups = group_ops(graph)
    seen = [op for g in groups.groups for op in g.ops]
    expected = sorted(op.name for op in graph.ops.values() if op.phase != "update")
    assert sorted(seen) == expected
    assert all(i < j for i, j in groups.edges)
    assert len(groups.units) <= 512
    for var in graph.trainable_variables():
        producers = {t.rpartition(":")[0] for t in var.gradients}
        assert producers & set(groups.groups[groups.gradient_group[var.name]].ops)

