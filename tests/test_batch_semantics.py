"""Batch semantics: the script's batch as the global batch (default), another global batch (``--global-batch``)
and every replica on the script's batch (``--batch-per-replica``, Horovod's), which a step that writes its batch
into a shape gets whatever was asked (autodist.graph.semantics).

On the old main the pinned step was planned and priced data-parallel and every replica died with "Cannot reshape
a tensor with ... elements to shape [8,6,2,4]"; ``--global-batch`` did not exist.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.plan_runs import captured, ring_plan

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
PINNED = os.path.join(SCRIPTS, "pinned_batch_loop.py")
FIT = os.path.join(SCRIPTS, "fit_default_shuffle.py")
SEEDED = ("import runpy, sys, keras; keras.utils.set_random_seed(int(sys.argv[1])); {patch}sys.argv = sys.argv[2:]; "
          "runpy.run_path(sys.argv[0], run_name='__main__')")


def _steps(batch):
    """A step writing ``batch`` into a shape, and the same step taking its batch from its input (a Keras Reshape)."""
    import keras
    import tensorflow as tf

    dense = keras.layers.Dense(8)
    reshape = keras.layers.Reshape((6, 2, 4))
    optimizer = keras.optimizers.SGD(0.1)

    def step(pin):
        @tf.function
        def train(x):
            with tf.GradientTape() as tape:
                h = dense(x)
                h = tf.reshape(h, [batch, 6, 2, 4]) if pin else reshape(h)
                loss = tf.reduce_mean(tf.square(h))
            optimizer.apply_gradients(zip(tape.gradient(loss, dense.trainable_variables), dense.trainable_variables))
            return loss
        return train

    return step(True), step(False)


def test_a_batch_written_into_a_shape_is_found_at_capture():
    from autodist.graph.trace import capture_step

    pinned, free = _steps(4)
    x = np.zeros((4, 6, 8), np.float32)
    reason = capture_step(pinned, x).job.batch_pinned
    assert "tracing it at batch 8 fails" in reason and "[4,6,2,4]" in reason and "test_batch_semantics.py" in reason
    assert capture_step(free, x).job.batch_pinned == ""


def test_every_strategy_bench_runs_keeps_a_pinned_batch_per_replica():
    """keras-io's switch transformer writes its batch of 50 into a shape: ``autodist run`` planned every replica on its
    own 50, but ``autodist bench`` wrote its baselines' plans from the step at the script's batch (the global batch
    split 25 a replica), and the ring baseline's replicas died ("Cannot reshape a tensor with 160000 elements to shape
    [10000,32]")."""
    from autodist.cli.bench_cmd import strategy_plans
    from autodist.graph.trace import capture_step
    from autodist.resource_spec import load_cluster
    from cost_models import CostModel

    item = capture_step(_steps(4)[0], np.zeros((4, 6, 8), np.float32))
    plans = strategy_plans(item, load_cluster(preset="cpu-local:2"), ["plan", "ring", "greedy-ps"],
                           CostModel.default(), moves=20)
    ran = [(name, plan) for name, plan, _ in plans if plan is not None]
    assert [name for name, _ in ran] == ["plan", "ring"]  # a custom loop: no PS baseline
    for name, plan in ran:
        assert (plan.graph["batch_per_replica"], plan.graph["batch_size"], plan.graph["script_batch"]) == (True, 8, 4), name


def test_each_semantics_plans_its_global_batch():
    from autodist.api import make_plan
    from autodist.errors import InputError
    from autodist.graph.semantics import planned_batch
    from autodist.graph.trace import capture_step

    pinned, free = _steps(4)
    x = np.zeros((4, 6, 8), np.float32)
    pinned, free = capture_step(pinned, x), capture_step(free, x)
    item = planned_batch(pinned, 2)  # pinned: every replica runs the script's batch, whatever was asked
    assert (item.job.batch_size, item.job.script_batch, item.job.batch_per_replica) == (8, 4, True)
    assert item.job.why_collective_only() and pinned.job.batch_size == 4
    with pytest.raises(InputError, match="pins its batch of 4 in a shape"):
        planned_batch(pinned, 2, global_batch=16)
    with pytest.raises(InputError, match="give one batch semantics"):
        planned_batch(free, 2, global_batch=16, per_replica=True)
    item = planned_batch(free, 2, global_batch=16)
    assert (item.job.batch_size, item.job.script_batch, item.job.batch_per_replica) == (16, 4, False)
    assert planned_batch(free, 2).job.batch_size == 4
    plan = make_plan(free, "cpu-local:4", moves=200, batch_per_replica=True)
    assert len(plan.strategy.replicas) == 4  # the replica count is the global batch's: the search keeps it
    assert (plan.graph["batch_size"], plan.graph["script_batch"], plan.graph["batch_per_replica"]) == (16, 4, True)
    assert plan.strategy.allreduces_everything()


def test_plan_and_report_at_another_global_batch(tmp_path):
    plan = subprocess.run([sys.executable, "-m", "autodist", "plan", FIT, "--preset", "cpu-local:2", "--moves", "50",
                           "--global-batch", "64", "-o", str(tmp_path / "plan.json"), "--", str(tmp_path / "w")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "batch: the global batch is 64 (--global-batch; the script's is 16)" in plan.stdout
    graph = json.loads((tmp_path / "plan.json").read_text())["graph"]
    assert (graph["batch_size"], graph["script_batch"]) == (64, 16)
    report = subprocess.run(["placement", "report", FIT, "--preset", "cpu-local:2", "--moves", "50",
                             "--batch-per-replica", "--format", "json", "--", str(tmp_path / "w")],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    job = json.loads(report.stdout)["job"]
    assert job["batch_size"] == 32 and job["batch_semantics"].startswith("every replica runs the script's batch of 16")
    refused = subprocess.run([sys.executable, "-m", "autodist", "run", PINNED, "--global-batch", "16", "--",
                              str(tmp_path / "w")], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "pins its batch of 8 in a shape" in refused.stderr.strip().splitlines()[-1]


def _weights(folder):
    return [dict(np.load(os.path.join(folder, f))) for f in sorted(os.listdir(folder))]


def _reference(tmp_path, name, script, seed, patch=""):
    (tmp_path / name).mkdir()
    done = subprocess.run([sys.executable, "-c", SEEDED.format(patch=patch), str(seed), script,
                           str(tmp_path / name / "w")], capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    (weights,) = _weights(tmp_path / name)
    return weights


def test_a_pinned_step_trains_on_two_replicas_each_on_its_own_batch(tmp_path):
    (tmp_path / "run").mkdir()
    done = subprocess.run([sys.executable, "-m", "autodist", "run", PINNED, "--preset", "cpu-local:2", "--moves", "50",
                           "--", str(tmp_path / "run" / "w")], capture_output=True, text=True, timeout=400,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "autodist: batch: every replica runs the script's batch of 8: the global batch is 2 x 8 = 16" in done.stdout
    replicas = _weights(tmp_path / "run")
    # one SGD step on the mean of two replicas' gradients: the mean of one process's step on each replica's data
    first, second = _reference(tmp_path, "seed0", PINNED, 0), _reference(tmp_path, "seed1", PINNED, 1)
    assert len(replicas) == 2 and any(not np.allclose(first[k], second[k]) for k in first)
    for weights in replicas:
        for key in first:
            np.testing.assert_allclose(weights[key], (first[key] + second[key]) / 2, rtol=1e-5, atol=1e-6)


def test_fit_runs_at_another_global_batch_as_keras_does_at_that_batch(tmp_path):
    from autodist.graph.semantics import planned_batch

    job = planned_batch(captured(FIT, tmp_path, [str(tmp_path / "unused")]), 2, global_batch=32)
    plan = ring_plan(job, tmp_path / "plan.json")
    (tmp_path / "run").mkdir()
    done = subprocess.run([sys.executable, "-m", "autodist", "run", FIT, "--plan", plan, "--",
                           str(tmp_path / "run" / "w")], capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    at_32 = ("fit = keras.Model.fit; "
             "keras.Model.fit = lambda self, *a, **k: fit(self, *a, **dict(k, batch_size=32)); ")
    single = _reference(tmp_path, "one", FIT, 0, at_32)
    for weights in _weights(tmp_path / "run"):
        for key in single:
            np.testing.assert_allclose(weights[key], single[key], rtol=1e-4, atol=1e-5)


def test_a_later_phase_keeps_every_replica_on_its_own_batch(tmp_path):
    from autodist.api import make_plan
    from autodist.graph.trace import capture_step
    from launcher.runtime import phases
    from launcher.runtime.layout import RunLayout

    _, free = _steps(4)
    plan = make_plan(capture_step(free, np.zeros((4, 6, 8), np.float32)), "cpu-local:2", moves=50,
                     batch_per_replica=True)
    plan.save(str(tmp_path / "plan.json"))
    later = phases.step_layout(RunLayout.from_plan(plan), str(tmp_path / "plan.json"), free,
                               (np.zeros((6, 6, 8), np.float32),), {}, "train.py:9")
    layout, line = later.layout, later.line
    assert layout.per_replica and (layout.batch_size, layout.step_rows) == (12, 6)
    assert "global batch 12, every replica on its own batch" in line


def _per_replica_plan(tmp_path, script):
    """A plan of two replicas each running ``script``'s batch (--batch-per-replica), allreduced by ring."""
    from autodist.graph.semantics import planned_batch

    job = planned_batch(captured(script, tmp_path, [str(tmp_path / "unused")]), 2, per_replica=True)
    return ring_plan(job, tmp_path / "plan.json")


def _per_replica_equals_twice_the_batch(tmp_path, script, steps_line, plan=None):
    """``script`` run on two replicas each on its batch of 8 (--batch-per-replica) ends with the weights of one
    process running it at batch 16: each replica trained on its own half of each global batch."""
    plan = plan or _per_replica_plan(tmp_path, script)
    (tmp_path / "run").mkdir()
    done = subprocess.run([sys.executable, "-m", "autodist", "run", script, "--plan", plan, "--",
                           str(tmp_path / "run" / "w")], capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert steps_line in done.stdout
    (tmp_path / "one").mkdir()
    reference = subprocess.run([sys.executable, "-c", SEEDED.format(patch=""), "0", script, str(tmp_path / "one" / "w"),
                                "16"], capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr[-2000:]
    (single,) = _weights(tmp_path / "one")
    replicas = _weights(tmp_path / "run")
    assert len(replicas) == 2
    for weights in replicas:
        for key in single:
            np.testing.assert_allclose(weights[key], single[key], rtol=1e-4, atol=1e-5)


def test_every_replica_reads_its_own_batches_of_an_unshuffled_pipeline(tmp_path):
    """Under --batch-per-replica, two replicas fitting a tf.data pipeline that does not shuffle take its batches in
    turn: their mean step is one process's step on the two batches together, so the weights equal one process
    training at twice the batch (before, each replica read every batch: the same examples on both, twice the
    steps)."""
    _per_replica_equals_twice_the_batch(tmp_path, os.path.join(SCRIPTS, "tfdata_in_order.py"),
                                        "step 12/12")  # 2 epochs of 6 rounds of two batches of 8


def test_every_replica_trains_its_own_rows_of_unshuffled_arrays(tmp_path):
    """Under --batch-per-replica, two replicas fitting arrays with shuffle=False, sample weights and a validation
    split each train on every other row of the split's training rows (weights with them): the weights equal one
    process training at twice the batch.  Before, both replicas trained every row, the same batches."""
    _per_replica_equals_twice_the_batch(tmp_path, os.path.join(SCRIPTS, "fit_arrays_in_order.py"),
                                        "step 10/10")  # 2 epochs of 5 batches of 8: 40 of the 80 training rows each


def test_a_custom_loop_reading_the_same_data_on_every_replica_is_refused(tmp_path):
    """A custom loop reads the script's data itself: under --batch-per-replica two replicas that read the same
    batches are refused at the first step, in one line saying how to shard (before, both trained on copies of
    each batch, silently); sharded with autodist.replica_count()/replica_rank(), the weights equal one process
    training at twice the batch."""
    script = os.path.join(SCRIPTS, "custom_loop_in_order.py")
    plan = _per_replica_plan(tmp_path, script)
    (tmp_path / "same").mkdir()
    refused = subprocess.run([sys.executable, "-m", "autodist", "run", script, "--plan", plan, "--",
                              str(tmp_path / "same" / "w"), "8", "unsharded"], capture_output=True, text=True,
                             timeout=400, cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    # Each replica's line; the chief's printed as is, another's quoted (indented) where it exits first.
    (line,) = {line.strip() for line in refused.stderr.splitlines() if "got the same batch" in line}
    assert "on 2 of 2 replicas" in line and "custom_loop_in_order.py:33)" in line
    assert "dataset.shard(autodist.replica_count(), autodist.replica_rank())" in line
    assert not os.listdir(tmp_path / "same")
    _per_replica_equals_twice_the_batch(tmp_path, script, "step 6", plan)  # 48 rows each, in batches of 8


def test_replica_rank_and_count_outside_a_run():
    import autodist

    assert (autodist.replica_rank(), autodist.replica_count()) == (0, 1)


def test_no_plan_baseline_or_bound_gives_a_replica_no_sample(mlp_graph):
    """A global batch of 4 on 16 GPUs: a replica without a sample would train on nothing, so the baselines run on
    the first 4 GPUs, the search never tries more, the default lower bound prices 4, and the report says why; 2
    micro-batches halve it again. Before, every baseline ran 16 replicas of one sample each, 16 samples priced as 4."""
    from autodist.graph.item import GraphItem
    from autodist.graph.rebatch import at_batch
    from autodist.graph.semantics import describe
    from autodist.resource_spec import load_cluster
    from cost_models import CostModel
    from placement import Problem, Simulator, baselines, lower_bound, optimize

    item = at_batch(GraphItem.from_dict(mlp_graph.to_dict()), 4)
    spec = load_cluster(preset="dgx-h100:2")
    problem = Problem(item, spec, CostModel.default())
    assert (len(spec.compute_devices()), problem.max_replicas) == (16, 4)
    candidates = baselines.all_baselines(Simulator(problem))
    assert candidates and all(len(c.strategy.replicas) <= 4 for c in candidates)
    assert max(len(c.strategy.replicas) for c in candidates) == 4
    searched = optimize(item, spec, CostModel.default(), moves=3000, seed=1)
    assert len(searched.strategy.replicas) <= 4
    first_four = [[d.name] for d in spec.compute_devices()[:4]]
    assert lower_bound(problem) == lower_bound(problem, replicas=first_four)
    assert "at most 4 of the cluster's 16 compute devices can take a replica" in describe(4, devices=16)
    item.job.micro_batches = 2
    assert Problem(item, spec, CostModel.default()).max_replicas == 2
    item.job.batch_size = 0  # not known (a graph built by hand): nothing to limit by
    assert Problem(item, spec, CostModel.default()).max_replicas == 16
