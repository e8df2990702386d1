"""Gradient accumulation in the runtime: each replica's slice of a step is cut into micro-batches whose gradients
are summed before one synchronisation and one update, so training equals single-process training on the full batch.

The job is benchmarks/models/run_small_mlp.py (real Keras, real TensorFlow); the one-client runtime trains in this
process, the collective runtime as two local replica processes (`autodist run --plan`).
"""

import json
import random

import numpy as np
import pytest

from autodist.graph.item import GraphItem
from autodist.plan import Plan
from autodist.resource_spec import load_cluster
from autodist.strategy import Strategy, VarSync
from tests.plan_runs import run_plan, save_plan
from tests.test_run import BATCH, CLUSTER, REPLICAS, STEPS, reference_weights, small_job  # noqa: F401

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


# -- strategy field, pricing and search move ---------------------------------------------


def test_the_strategys_micro_batches_round_trip_and_bad_counts_name_the_field(mlp_graph):
    spec = load_cluster(preset="cpu-2s-25g:2")
    names = {v.name for v in mlp_graph.trainable_variables()}
    strategy = Strategy(replicas=[[d.name] for d in spec.devices()], sync={n: VarSync("allreduce") for n in names})
    assert "micro_batches" not in strategy.to_dict()  # as the job says: older plans stay byte-identical
    strategy.micro_batches = 4
    data = json.loads(json.dumps(strategy.to_dict()))
    assert data["micro_batches"] == 4 and Strategy.from_dict(data).micro_batches == 4
    for bad in (0, -2, 1.5, True):
        strategy.micro_batches = bad
        problems = dict(strategy.problems({d.name for d in spec.devices()}, names))
        assert "must be an integer >= 1" in problems["strategy.micro_batches"]


def test_the_strategys_count_overrides_the_jobs_in_the_simulator(mlp_graph):
    from cost_models import CostModel
    from placement import Problem, Simulator, baselines

    spec = load_cluster(preset="cpu-2s-25g:2")
    sim = Simulator(Problem(mlp_graph, spec, CostModel.default()))
    strategy = baselines.data_parallel(sim.problem)
    one = sim.simulate(strategy, trace=True)
    strategy.micro_batches = 4
    four = sim.simulate(strategy, trace=True)
    # Four passes over a quarter of each replica's rows: the same work, plus each pass's fixed costs.
    assert one.compute_time < four.compute_time < 4 * one.compute_time
    assert any(e[0] == "micro-batches 1-3" for e in four.events)
    device = strategy.replicas[0][0]
    # The accumulation buffer is added; a quarter of the rows holds fewer live tensors.
    assert 0 < four.memory[device] - one.memory[device] <= mlp_graph.parameter_bytes()
    # Cached schedules are per count: going back gives the one-micro-batch step again.
    strategy.micro_batches = None
    assert sim.simulate(strategy).step_time == one.step_time


def test_the_micro_batch_move_only_when_allowed_doubles_or_halves_within_the_rows(mlp_graph):
    from cost_models import CostModel
    from placement import Problem, Simulator, baselines
    from placement.space import StrategySpace, copy_strategy

    spec = load_cluster(preset="cpu-2s-25g:2")
    sim = Simulator(Problem(mlp_graph, spec, CostModel.default()))
    strategy = baselines.data_parallel(sim.problem)
    assert "micro_batches" not in StrategySpace(sim.problem, random.Random(0)).applicable(strategy)
    space = StrategySpace(sim.problem, random.Random(0), allow_micro_batches=True)
    assert "micro_batches" in space.applicable(strategy)
    rows = mlp_graph.job.batch_size // len(strategy.replicas)
    seen = set()
    for _ in range(40):
        before = strategy.micro_batches or 1
        space._micro_batches(strategy)
        assert strategy.micro_batches in (before * 2, before // 2, rows) and 1 <= strategy.micro_batches <= rows
        seen.add(strategy.micro_batches)
    assert len(seen) > 2
    assert copy_strategy(strategy).micro_batches == strategy.micro_batches


def _assert_same_weights(trained, reference):
    assert sorted(trained) == sorted(reference)
    for name, expected in reference.items():
        np.testing.assert_allclose(trained[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)


def _hybrid_layout(model, micro_batches):
    """Two replicas on this CPU: the embedding in two PS shards (sparse gradients), the rest allreduced."""
    from launcher.runtime.layout import RunLayout, VariablePlacement

    variables = {}
    for w in model.trainable_weights:
        method = "ps" if w.path.startswith("embedding") else "allreduce"
        variables[w.path] = VariablePlacement(w.path, method, (CPU, CPU))
    return RunLayout((CPU, CPU), ("n0", "n1"), variables, predicted_step_time=1e-3, micro_batches=micro_batches)


@pytest.mark.parametrize("micro_batches", [2, 3])  # 3 cuts each replica's 8 rows unevenly: 2, 3 and 3
def test_one_client_accumulation_trains_like_plain_keras_on_the_full_batch(micro_batches, reference_weights):  # noqa: F811
    from run_small_mlp import build_model, make_data

    from launcher.runtime.trainer import PlacedTrainer

    model = build_model(0)
    trainer = PlacedTrainer(model, _hybrid_layout(model, micro_batches))
    x, y = make_data(STEPS, BATCH, seed=0)
    for start in range(0, len(x), BATCH):
        trainer.step(x[start:start + BATCH], y[start:start + BATCH])
    _assert_same_weights(trainer.placed_values(), reference_weights)
    # Every replica ran forward and backward once per micro-batch: one loss op each.
    graph = trainer._traced_step().get_concrete_function(x[:BATCH], y[:BATCH]).graph
    losses = [op for op in graph.get_operations() if op.type == "SparseSoftmaxCrossEntropyWithLogits"]
    assert len(losses) == 2 * micro_batches


@pytest.fixture(scope="module")
def accumulating_plan(small_job, tmp_path_factory):  # noqa: F811
    """An allreduce plan for two replica processes whose job accumulates 2 micro-batches per step."""
    from autodist.api import with_job_options

    job = with_job_options(GraphItem.from_dict(small_job.to_dict()), micro_batches=2)
    strategy = Strategy(replicas=REPLICAS, sync={v.name: VarSync("allreduce", bucket=i % 2)
                                                 for i, v in enumerate(job.trainable_variables())})
    return save_plan(job, load_cluster(preset=CLUSTER), strategy, tmp_path_factory.mktemp("micro") / "plan.json")


@pytest.mark.slow
def test_two_replica_processes_accumulate_and_train_like_one(accumulating_plan, reference_weights, tmp_path):  # noqa: F811
    done, record, weights = run_plan(accumulating_plan, str(tmp_path), "--micro-batches", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["micro_batches"] for r in record["replicas"]] == [2, 2]
    assert all(r["steps"] == STEPS for r in record["replicas"])
    _assert_same_weights(weights, reference_weights)


def test_a_micro_batch_count_other_than_the_plans_is_one_line_exit_2(accumulating_plan, tmp_path):
    done, _, _ = run_plan(accumulating_plan, str(tmp_path), "--micro-batches", "3")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "--micro-batches" in done.stderr and "made for 2 micro-batches" in done.stderr


def test_the_runtime_and_the_report_take_the_strategys_count_over_the_jobs(accumulating_plan):
    from autodist.report.document import build_report
    from launcher.runtime.layout import RunLayout

    plan = Plan.load(accumulating_plan)
    assert RunLayout.from_plan(plan).micro_batches == plan.micro_batches == 2  # the job's
    data = json.loads(plan.to_json())
    data["strategy"]["micro_batches"] = 4
    plan = Plan.from_dict(data)
    assert RunLayout.from_plan(plan).micro_batches == plan.micro_batches == 4
    assert build_report(plan)["costs"]["micro_batches"] == 4
