"""The CPU executor model: overlapped schedules of real step graphs, its fit, its use by CostModel."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autodist.resource_spec import load_cluster
from cost_models import CostModel
from cost_models.dataset import read_meta, read_timings
from cost_models.executor import ExecutorModel, fit_width_seconds, op_predecessors
from cost_models.model import TIMINGS, TIMINGS_META, fit_executor, fit_executor_overhead, profiled_cores

TWO_CORES = ExecutorModel(lanes=2, cores=2.0, width_seconds=1e-3)


@pytest.fixture(scope="module")
def mlp_rows():
    """The shipped measurements of the zoo MLP's step: per-op seconds and the step's graph."""
    rows = read_timings(TIMINGS)
    return rows.subset(rows.origin == "mlp")


def test_a_chain_runs_one_op_after_another():
    seconds = np.array([1e-3, 2e-3, 5e-6, 4e-3])
    makespan, share = TWO_CORES.schedule(seconds, [[], [0], [1], [2]])
    assert makespan == pytest.approx(seconds.sum())
    assert share == pytest.approx(seconds)


def test_independent_small_ops_overlap_and_large_ones_share_the_cores():
    small = np.array([1e-6, 1e-6])
    assert TWO_CORES.schedule(small, [[], []])[0] == pytest.approx(1e-6, rel=0.01)
    large = np.array([1.0, 1.0])
    assert TWO_CORES.schedule(large, [[], []])[0] == pytest.approx(2.0, rel=0.01)


def test_at_most_lanes_ops_run_at_once():
    one_lane = ExecutorModel(lanes=1, cores=2.0, width_seconds=1.0)
    seconds = np.full(5, 1e-3)
    assert one_lane.schedule(seconds, [[]] * 5)[0] == pytest.approx(seconds.sum())


def test_schedule_of_a_real_step_is_between_its_critical_path_and_its_sum(mlp_rows):
    seconds = np.nan_to_num(mlp_rows.seconds) + 5e-6
    preds = mlp_rows.predecessors()
    makespan, share = TWO_CORES.schedule(seconds, preds)
    assert share.sum() == pytest.approx(makespan)
    assert seconds.sum() / 2 <= makespan < seconds.sum()
    graph = nx.DiGraph((j, i) for i, p in enumerate(preds) for j in p)
    graph.add_nodes_from(range(len(seconds)))
    finish = {}
    for i in nx.topological_sort(graph):
        finish[i] = seconds[i] + max((finish[j] for j in preds[i]), default=0.0)
    assert makespan >= max(finish.values()) * (1 - 1e-9)


def test_predecessors_of_a_captured_graph_are_its_data_and_control_inputs(mlp_graph):
    ops = list(mlp_graph.ops.values())
    preds = op_predecessors(ops)
    for op, mine in zip(ops, preds):
        assert {ops[j].name for j in mine} == set(mlp_graph.graph.predecessors(op.name))
    assert any(t.startswith("^") for op in ops for t in op.inputs)


def test_fit_recovers_the_width_that_produced_the_steps():
    rows = read_timings(TIMINGS)
    steps = []
    for name in ("mlp", "wide_deep", "transformer_lm"):
        mine = rows.subset(rows.origin == name)
        seconds = np.nan_to_num(mine.seconds) + 5e-6
        steps.append((seconds, mine.predecessors(), TWO_CORES.schedule(seconds, mine.predecessors())[0]))
    assert fit_width_seconds(steps, 2, 2.0) == pytest.approx(TWO_CORES.width_seconds, rel=0.1)
    assert fit_width_seconds([], 2, 2.0) is None


def test_shipped_executor_model_is_fitted_on_default_executor_steps():
    meta = read_meta(TIMINGS_META)
    rows = read_timings(TIMINGS)
    cores = profiled_cores(meta)
    shipped = CostModel.default().executor
    assert shipped.lanes == cores
    overhead = fit_executor_overhead(rows, meta["steps"])
    assert fit_executor(rows, meta["steps"], overhead, cores) == shipped


def test_cpu_step_shares_overlap_and_gpu_shares_are_op_times(mlp_graph):
    cm = CostModel.default()
    cpu = load_cluster(preset="cpu-local").devices("CPU")[0]
    costs = cm.op_costs(mlp_graph, cpu)
    alone = sum(c.seconds for c in costs.values())
    step = sum(c.step_seconds for c in costs.values())
    assert alone / cm.executor.cores <= step < alone
    h100 = load_cluster(preset="dgx-h100").gpus()[0]
    assert all(c.step_seconds == c.seconds for c in cm.op_costs(mlp_graph, h100).values())


@st.composite
def _dags(draw):
    n = draw(st.integers(1, 30))
    seconds = draw(st.lists(st.floats(0.0, 1e-2), min_size=n, max_size=n))
    preds = [sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)]
    return np.array(seconds), preds


@settings(max_examples=200, deadline=None)
@given(_dags(), st.integers(1, 4), st.floats(1e-6, 1e-1))
def test_any_schedule_conserves_work_and_respects_dependencies(dag, lanes, width_seconds):
    seconds, preds = dag
    model = ExecutorModel(lanes, float(lanes), width_seconds)
    makespan, share = model.schedule(seconds, preds)
    assert share.sum() == pytest.approx(makespan, rel=1e-9, abs=1e-12)
    assert seconds.sum() / lanes * (1 - 1e-9) <= makespan <= seconds.sum() * (1 + 1e-9) + 1e-12
    finish = []
    for i, p in enumerate(preds):
        finish.append(seconds[i] + max((finish[j] for j in p), default=0.0))
    assert makespan >= max(finish) * (1 - 1e-9)
