"""`autodist bench`: every strategy run for real beside its prediction, and bad input refused in one line.

The runs are real: benchmarks/models/run_small_mlp.py captured, planned and
trained by local TensorFlow tasks under the searched plan and each baseline.
"""

import dataclasses
import json
import os
import re
import subprocess
import sys

import pytest

from autodist.cli.bench_cmd import DEFAULT_STRATEGIES as STRATEGIES
from tests.test_emulation import shared_folder  # noqa: F401
from tests.test_run import SCRIPT, _processes_naming

TWO_BY_TWO = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "clusters", "emu-1gbit-2x2.yaml")

TINY = ["--budget", "0.5", "--", "--steps", "4", "--batch-size", "16"]


TF_LOG_LINE = re.compile(r"[IWEF]\d{4} ")


def _bench(argv, cwd, prefix=()):
    return subprocess.run([*prefix, sys.executable, "-m", "autodist", "bench", *argv], capture_output=True, text=True,
                          timeout=600, cwd=cwd)


def _one_line_exit_2(done):
    assert done.returncode == 2, done.stderr[-2000:]
    # TensorFlow's own log lines (absl's "I0000 ..." prefix; oneDNN's notice speaks of round-off "errors") are not ours
    lines = [line for line in done.stderr.splitlines() if "error" in line.lower() and not TF_LOG_LINE.match(line)]
    assert len(lines) == 1 and lines[0].startswith("autodist: error: "), done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.mark.parametrize("options, message", [
    (["--strategies", "plan,rng"], "argument --strategies: unknown strategy 'rng' (did you mean 'ring'?)"),
    (["--steps", "0"], "argument --steps: must be an integer from 1 to 100000, got '0'"),
    ([], "cluster: give the cluster to run on: --preset NAME[:N] or --cluster FILE"),
])
def test_bad_options_are_one_line_and_exit_2(options, message, tmp_path):
    preset = [] if not options else ["--preset", "cpu-local:2"]
    line = _one_line_exit_2(_bench([SCRIPT, *preset, *options], tmp_path))
    assert message in line
    assert not os.listdir(tmp_path)  # refused before anything is written


def test_an_emulated_cluster_without_root_is_one_line_and_exit_2(shared_folder):  # noqa: F811
    folder, as_nobody = shared_folder
    line = _one_line_exit_2(_bench([SCRIPT, "--preset", "emu-1gbit:2"], folder, as_nobody))
    assert "cluster 'emu-1gbit:2' is emulated on this machine, which needs root" in line
    assert not os.listdir(folder)


def test_strategies_that_run_one_program_share_one_run(mlp_graph):
    """With one replica per node hierarchical and master run as the ring (autodist.collective_stages): ring and
    hierarchical data parallelism are one program there; another bucket is another, and so is each algorithm on
    two replicas per node."""
    from autodist.cli.bench_cmd import runtime_program
    from autodist.resource_spec import load_cluster
    from cost_models import CostModel
    from placement import Problem
    from placement.baselines import data_parallel

    problem = Problem(mlp_graph, load_cluster(preset="emu-1gbit:2"), CostModel.default())
    ring, hierarchical = data_parallel(problem), data_parallel(problem, algorithm="hierarchical")
    assert ring.allreduces_everything() and ring.sync != hierarchical.sync
    spec = problem.resource_spec
    assert runtime_program(ring, spec) == runtime_program(hierarchical, spec)
    first = sorted(ring.sync)[0]
    rebucketed = dataclasses.replace(ring, sync={**ring.sync, first: dataclasses.replace(ring.sync[first], bucket=7)})
    assert runtime_program(rebucketed, spec) != runtime_program(ring, spec)
    # two replicas per node: hierarchical and master run their own stages, three programs
    two_per_node = Problem(mlp_graph, load_cluster(TWO_BY_TWO), CostModel.default())
    spec = two_per_node.resource_spec
    programs = {runtime_program(data_parallel(two_per_node, algorithm=a), spec) for a in ("ring", "hierarchical", "master")}
    assert len(programs) == 3


def test_a_script_that_trains_fewer_steps_than_asked_is_measured_on_all_but_its_first():
    """A script that trains 4 steps (a corpus script cut short: two fits of two batches) under --steps 10 is measured
    on its last 3 and says so; before, bench ran it and then refused ("the script trained 4 steps")."""
    from autodist.cli.bench_cmd import add_ranks, measured_times, render_text, strategy_row
    from autodist.errors import LaunchError

    record = {"step_times": [0.9, 0.01, 0.02, 0.03]}
    assert measured_times(record, 10, "ring") == [0.01, 0.02, 0.03]
    assert measured_times(record, 2, "ring") == [0.02, 0.03]
    with pytest.raises(LaunchError, match="trained 1 step, and the first is warm-up: give the script at least 2"):
        measured_times({"step_times": [0.9]}, 10, "ring")
    (row,) = add_ranks([strategy_row("ring", None, None, "", measured_times(record, 10, "ring"))])
    text = render_text({"script": "s.py", "cluster": "cpu-local:2", "steps": 10, "strategies": [row]})
    assert row["measured_steps"] == 3 and "(median of 3 steps: all the script trained but the first)" in text
    (row,) = add_ranks([strategy_row("ring", None, None, "", measured_times(record, 3, "ring"))])
    assert "all the script trained" not in render_text({"script": "s.py", "cluster": "c", "steps": 3, "strategies": [row]})


def test_bench_measures_the_phase_its_plan_was_priced_for():
    """A script of two training phases (a later model.fit planned where it starts) is measured on its first phase's
    steps, the step the plan was made and priced for; before, on the run's last steps, another phase's."""
    from autodist.cli.bench_cmd import measured_times
    from autodist.errors import LaunchError

    record = {"step_times": [0.9, 0.01, 0.02, 0.03, 0.5, 0.6, 0.7], "phase_first_steps": [1, 5]}
    assert measured_times(record, 10, "ring") == [0.01, 0.02, 0.03]
    assert measured_times(record, 2, "ring") == [0.02, 0.03]
    with pytest.raises(LaunchError, match="trained 1 step in its first phase"):
        measured_times({"step_times": [0.9, 0.5, 0.6], "phase_first_steps": [1, 2]}, 10, "ring")


@pytest.mark.slow
def test_bench_runs_every_strategy_and_reports_both_times(tmp_path):
    done = _bench([SCRIPT, "--preset", "cpu-local:2", "--steps", "3", "--format", "json", "-o", "plans", *TINY],
                  tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)["strategies"]
    assert [r["name"] for r in rows] == list(STRATEGIES)
    for r in rows:
        assert r["measured_step_time"] > 0 and r["predicted_step_time"] > 0, r
        assert r["measured_p25"] <= r["measured_step_time"] <= r["measured_p75"]
        assert r["measured_over_predicted"] == pytest.approx(r["measured_step_time"] / r["predicted_step_time"])
    assert sorted(r["measured_rank"] for r in rows) == sorted(r["predicted_rank"] for r in rows) == [1, 2, 3, 4, 5, 6]
    assert sorted(os.listdir(tmp_path / "plans")) == sorted(f"{name}.json" for name in STRATEGIES)
    # Strategies of one program ran once and share that run's times.
    by_name = {r["name"]: r for r in rows}
    shared = [r for r in rows if "same_run_as" in r]
    assert all(r["measured_step_time"] == by_name[r["same_run_as"]]["measured_step_time"] for r in shared)
    assert done.stderr.count("autodist: bench: running") == len(rows) - len(shared)
    assert not _processes_naming(str(tmp_path))


@pytest.mark.slow
def test_a_script_that_raises_in_one_task_is_one_line_exit_2_and_nothing_left(tmp_path):
    script = tmp_path / "raises_in_a_worker.py"
    script.write_text(f"import sys\nimport autodist\nsys.path.insert(0, {os.path.dirname(SCRIPT)!r})\n"
                      "if not autodist.is_chief():\n    raise RuntimeError('boom in the second replica')\n"
                      "from run_small_mlp import main\nmain()\n")
    line = _one_line_exit_2(_bench([str(script), "--preset", "cpu-local:2", "--strategies", "ring", *TINY], tmp_path))
    assert "strategy ring: task worker:1" in line and line.endswith("RuntimeError: boom in the second replica")
    assert not _processes_naming(str(tmp_path))


def test_a_fit_on_a_dataset_of_fewer_batches_than_bench_measures_trains_it_repeated():
    """keras_io_image_classification_from_scratch trains one epoch of one batch: bench ran it, then refused ("the
    script trained 1 step, and the first is warm-up").  Under bench's variable a fit on a dataset of fewer batches
    trains it repeated, one epoch of as many steps as asked; Keras' own fit counts them."""
    import keras
    import numpy as np
    import tensorflow as tf

    from launcher.runtime.fit import MIN_STEPS_ENV, fewer_steps_repeated

    data = tf.data.Dataset.from_tensor_slices((np.ones((8, 3), "float32"), np.ones((8, 1), "float32"))).batch(8)
    wanted = {MIN_STEPS_ENV: "11"}
    x, kwargs = fewer_steps_repeated(data, {"epochs": 1}, wanted)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    batches = []
    model.fit(x, **kwargs, verbose=0, callbacks=[keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batches.append(batch))])
    assert len(batches) == 11
    x, kwargs = fewer_steps_repeated(data, {"epochs": 4}, wanted)
    assert kwargs["steps_per_epoch"] == 3  # 12 steps over the four epochs
    long_enough = data.unbatch().batch(1)
    assert fewer_steps_repeated(long_enough, {"epochs": 2}, wanted) == (long_enough, {"epochs": 2})
    assert fewer_steps_repeated(data, {"epochs": 1}, {}) == (data, {"epochs": 1})
    arrays = np.ones((8, 3))
    assert fewer_steps_repeated(arrays, {"epochs": 1}, wanted)[0] is arrays


def test_a_repeated_fit_replays_the_scripts_batches_not_new_draws():
    """keras-io's mixup draws random mixing weights in its tf.data map (and reshuffles): repeated by bench, every
    pass drew anew, in each replica at its own pace, where the docstring promised the script's batches again.  The
    repetitions replay the first pass."""
    import numpy as np
    import tensorflow as tf

    from launcher.runtime.fit import MIN_STEPS_ENV, fewer_steps_repeated

    data = tf.data.Dataset.range(4).batch(2).map(lambda b: tf.cast(b, tf.float32) + tf.random.uniform([2]))
    x, _ = fewer_steps_repeated(data, {"epochs": 1}, {MIN_STEPS_ENV: "6"})
    passes = np.array([b.numpy() for b in x.take(6)]).reshape(3, 2, 2)
    np.testing.assert_array_equal(passes[1], passes[0])
    np.testing.assert_array_equal(passes[2], passes[0])
