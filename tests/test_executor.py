"""The CPU executor model: overlapped schedules of real step graphs, its fit, its use by CostModel."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autodist.resource_spec import load_cluster
from cost_models import CostModel
from cost_models.fitting.dataset import read_meta, read_timings
from cost_models.executor import ExecutorModel, fit_serial_overhead, measured_widths, op_predecessors, settling_runs
from cost_models.model import TIMINGS, TIMINGS_META, fit_executor, fit_executor_overhead, measured_step, profiled_cores

TWO_CORES = ExecutorModel(lanes=2, cores=2.0, memory_bandwidth=10e9, serial_overhead=0.0)


def _alone(seconds, widths=2.0):
    """Widths and bytes for ops that use ``widths`` cores and move next to no memory."""
    return np.full(len(seconds), widths), np.zeros(len(seconds))


@pytest.fixture(scope="module")
def mlp_rows():
    """The shipped measurements of the zoo MLP's step: per-op seconds and the step's graph."""
    rows = read_timings(TIMINGS)
    return rows.subset(rows.origin == "mlp")


def test_a_chain_runs_one_op_after_another():
    seconds = np.array([1e-3, 2e-3, 5e-6, 4e-3])
    makespan, share = TWO_CORES.schedule(seconds, *_alone(seconds), [[], [0], [1], [2]])
    assert makespan == pytest.approx(seconds.sum())
    assert share == pytest.approx(seconds)


def test_one_core_ops_overlap_and_ops_using_every_core_share_them():
    seconds = np.array([1e-3, 1e-3])
    assert TWO_CORES.schedule(seconds, *_alone(seconds, 1.0), [[], []])[0] == pytest.approx(1e-3)
    assert TWO_CORES.schedule(seconds, *_alone(seconds, 2.0), [[], []])[0] == pytest.approx(2e-3)
    # 1.5 cores each: together they want 3 of 2, so each runs at 2/3 of its speed.
    assert TWO_CORES.schedule(seconds, *_alone(seconds, 1.5), [[], []])[0] == pytest.approx(1.5e-3)


def test_memory_bound_ops_side_by_side_share_the_bandwidth():
    seconds = np.array([1e-3, 1e-3])
    widths = np.ones(2)
    # Each streams 8 GB/s alone; together 16 of the 10 GB/s there are.
    makespan, share = TWO_CORES.schedule(seconds, widths, np.full(2, 8e6), [[], []])
    assert makespan == pytest.approx(1.6e-3)
    assert share.sum() == pytest.approx(makespan)
    # One op streaming more than the machine's figure alone still runs at its own speed.
    assert TWO_CORES.schedule(seconds[:1], widths[:1], [20e6], [[]])[0] == pytest.approx(1e-3)


def test_serial_overhead_overlaps_nothing():
    model = ExecutorModel(lanes=2, cores=2.0, memory_bandwidth=10e9, serial_overhead=1e-4)
    seconds = np.array([1e-3, 1e-3, 5e-5])
    makespan, share = model.schedule(seconds, *_alone(seconds, 1.0), [[], [], []])
    # The kernels (0.9 ms each and the third op's nothing) overlap; 0.1 + 0.1 + 0.05 ms do not.
    assert makespan == pytest.approx(0.9e-3 + 0.25e-3)
    assert share == pytest.approx([0.55e-3, 0.55e-3, 0.05e-3])


def test_at_most_lanes_ops_run_at_once():
    one_lane = ExecutorModel(lanes=1, cores=2.0, memory_bandwidth=10e9, serial_overhead=0.0)
    seconds = np.full(5, 1e-3)
    assert one_lane.schedule(seconds, *_alone(seconds, 1.0), [[]] * 5)[0] == pytest.approx(seconds.sum())


def test_measured_widths_are_one_thread_over_all_core_times():
    widths = measured_widths([1e-3, 1e-3, 1e-3, np.nan, 2e-3], [1.7e-3, 0.8e-3, 3e-3, 1e-3, np.nan], 2.0)
    assert widths == pytest.approx([1.7, 1.0, 2.0, 1.0, 1.0])


def test_schedule_of_a_real_step_is_between_its_critical_path_and_its_sum(mlp_rows):
    seconds, widths, moved, preds = measured_step(mlp_rows, 5e-6, 2.0)
    assert 1.0 <= widths.min() and widths.max() <= 2.0 and widths.max() > 1.0
    makespan, share = TWO_CORES.schedule(seconds, widths, moved, preds)
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


def test_fit_recovers_the_serial_overhead_that_produced_the_steps():
    rows = read_timings(TIMINGS)
    truth = ExecutorModel(lanes=2, cores=2.0, memory_bandwidth=10e9, serial_overhead=3e-6)
    steps = []
    for name in ("mlp", "wide_deep", "transformer_lm"):
        step = measured_step(rows.subset(rows.origin == name), 5e-6, 2.0)
        steps.append((*step, truth.schedule(*step)[0]))
    assert fit_serial_overhead(steps, 2, 2.0, 10e9, 5e-6) == pytest.approx(3e-6, rel=0.05)
    assert fit_serial_overhead([], 2, 2.0, 10e9, 5e-6) is None


def test_shipped_executor_model_is_fitted_on_default_executor_steps():
    meta = read_meta(TIMINGS_META)
    rows = read_timings(TIMINGS)
    cores = profiled_cores(meta)
    shipped = CostModel.default().executor
    assert shipped.lanes == cores and 0 <= shipped.serial_overhead <= CostModel.default().executor_overhead
    assert shipped.memory_bandwidth == rows.memory_bandwidth[0]
    overhead = fit_executor_overhead(rows, meta["steps"])
    refit = fit_executor(rows, meta["steps"], overhead, cores)
    # Equal to the last bits only under the same BLAS kernels: OpenBLAS picks them by CPU (OPENBLAS_CORETYPE).
    assert (refit.lanes, refit.cores, refit.memory_bandwidth) == (shipped.lanes, shipped.cores, shipped.memory_bandwidth)
    assert refit.serial_overhead == pytest.approx(shipped.serial_overhead, rel=1e-6)


def test_serial_overhead_is_fitted_on_the_steps_timed_settled():
    # Training runs with the executor settled; the larger zoo models' steps were timed before it settled.
    meta = read_meta(TIMINGS_META)
    rows = read_timings(TIMINGS)
    cores = profiled_cores(meta)
    overhead = fit_executor_overhead(rows, meta["steps"])
    settled = {name: r for name, r in meta["steps"].items() if settling_runs(r["default_step_seconds"])}
    assert {"mlp", "wide_deep", "transformer_lm"} <= set(settled) and "vgg16" not in settled
    from_settled = fit_executor(rows, settled, overhead, cores)
    assert fit_executor(rows, meta["steps"], overhead, cores) == from_settled
    # With no settled step, the unsettled ones are all there is to fit on: a model, not none.
    assert fit_executor(rows, {}, overhead, cores) is None
    assert fit_executor(rows, {"vgg16": meta["steps"]["vgg16"]}, overhead, cores) is not None


def test_learned_widths_a_large_matmul_uses_every_core_a_small_op_one():
    # The one-thread model against the all-core one, on the shipped micro-benchmarks.
    cm = CostModel.default()
    rows = read_timings(TIMINGS)
    rows = rows.subset(rows.origin == "micro")
    widths = cm._widths(rows.raw["op_type"], *cm._learned_kernels(rows.raw, rows.peak_flops[0], rows.memory_bandwidth[0]))
    large_matmul = (rows.raw["op_type"] == "MatMul") & (rows.raw["flops"] >= 1e9)
    small = rows.seconds < 20e-6
    assert large_matmul.sum() > 10 and small.sum() > 100
    assert np.median(widths[large_matmul]) > 1.6 and np.median(widths[small]) < 1.1
    measured = measured_widths(rows.seconds, rows.seconds_one_thread, cm.executor.cores)
    assert np.median(measured[large_matmul]) > 1.6 and np.median(measured[small]) < 1.1


def test_cpu_step_shares_overlap_and_gpu_shares_are_op_times(mlp_graph):
    cm = CostModel.default()
    cpu = load_cluster(preset="cpu-local").devices("CPU")[0]
    costs = cm.op_costs(mlp_graph, cpu)
    alone = sum(c.seconds for c in costs.values())
    step = sum(c.step_seconds for c in costs.values())
    assert alone / cm.executor.cores <= step < alone
    # A GPU runs one kernel at a time: an op adds its kernel time to the step, or more where the GPU waits for
    # the host to launch it.
    h100 = load_cluster(preset="dgx-h100").gpus()[0]
    assert all(c.step_seconds >= c.seconds * (1 - 1e-9) for c in cm.op_costs(mlp_graph, h100).values())


@st.composite
def _dags(draw):
    n = draw(st.integers(1, 30))
    seconds = draw(st.lists(st.floats(0.0, 1e-2), min_size=n, max_size=n))
    widths = draw(st.lists(st.floats(1.0, 4.0), min_size=n, max_size=n))
    moved = draw(st.lists(st.floats(0.0, 1e8), min_size=n, max_size=n))
    preds = [sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else [] for i in range(n)]
    return np.array(seconds), np.array(widths), np.array(moved), preds


@settings(max_examples=200, deadline=None)
@given(_dags(), st.integers(1, 4), st.floats(1e9, 1e11), st.floats(0.0, 1e-4))
def test_any_schedule_conserves_work_and_respects_dependencies(dag, lanes, bandwidth, serial):
    seconds, widths, moved, preds = dag
    model = ExecutorModel(lanes, float(lanes), bandwidth, serial)
    makespan, share = model.schedule(seconds, np.minimum(widths, lanes), moved, preds)
    assert share.sum() == pytest.approx(makespan, rel=1e-9, abs=1e-12)
    assert seconds.sum() / lanes * (1 - 1e-9) <= makespan <= seconds.sum() * (1 + 1e-9) + 1e-12
    finish = []
    for i, p in enumerate(preds):
        finish.append(seconds[i] + max((finish[j] for j in p), default=0.0))
    assert makespan >= max(finish) * (1 - 1e-9)
