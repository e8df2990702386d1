"""Constructs of the corpus' scripts that stopped ``autodist run`` on two replicas, reproduced in scripts of our own.

- a MultiWorkerMirroredStrategy script that finds its chief through ``strategy.cluster_resolver``
  (tf_docs_distribute_multi_worker_with_keras): the strategy autodist substitutes had no resolver, so
  ``cluster_resolver.task_type`` raised AttributeError in every replica;
- a model with a string feature compiled with ``run_eagerly=True`` (tf_docs_structured_data_preprocessing_layers):
  the batch checksum cast strings to float, and the replica step ran its collectives eagerly;
- a model compiled with ``jit_compile=True`` (keras_io_image_classification_from_scratch): Keras compiled the
  replica step, collectives and all, with XLA, which refuses them on CPUs ("Only compiling NCCL/auto collective is
  supported, got: ring"), and every replica died.
"""

import os
import subprocess
import sys

from tests.plan_runs import captured, ring_plan

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def test_a_replaced_strategy_names_this_replica_as_a_worker():
    import tensorflow as tf

    from autodist import hooks

    with hooks.single_replica_strategies(out=open(os.devnull, "w"), task_id=1):
        resolver = tf.distribute.MultiWorkerMirroredStrategy().cluster_resolver
        assert (resolver.task_type, resolver.task_id) == ("worker", 1)
    assert tf.distribute.get_strategy().cluster_resolver is None  # as it was


def _run_on_two_replicas(name, tmp_path, *script_args):
    script = os.path.join(SCRIPTS, f"{name}.py")
    plan = ring_plan(captured(script, tmp_path, script_args), tmp_path / "plan.json")
    return subprocess.run([sys.executable, "-m", "autodist", "run", script, "--plan", plan, "--", *script_args],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)


def test_only_the_chief_replica_writes_where_the_script_asks_its_resolver(tmp_path):
    done = _run_on_two_replicas("chief_writes", tmp_path, str(tmp_path / "out" / "w"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert os.listdir(tmp_path / "out") == ["w.npz"]


def test_string_features_train_eagerly_on_two_replicas(tmp_path):
    done = _run_on_two_replicas("string_features_eager", tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "trained" in done.stdout


def test_a_jit_compiled_model_trains_on_two_cpu_replicas_as_one_process(tmp_path):
    import numpy as np

    (tmp_path / "run").mkdir()
    done = _run_on_two_replicas("fit_jit_compiled", tmp_path, str(tmp_path / "run" / "w"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "jit_compile=True step runs without XLA, as the plan priced it: the plan's 2 CPU replicas" in done.stdout
    (tmp_path / "one").mkdir()
    seeded = ("import runpy, sys, keras; keras.utils.set_random_seed(0); sys.argv = sys.argv[1:]; "
              "runpy.run_path(sys.argv[0], run_name='__main__')")  # as every replica is seeded
    single = subprocess.run([sys.executable, "-c", seeded, os.path.join(SCRIPTS, "fit_jit_compiled.py"),
                             str(tmp_path / "one" / "w")], capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert single.returncode == 0, single.stderr[-2000:]
    (reference,) = [np.load(tmp_path / "one" / f) for f in os.listdir(tmp_path / "one")]
    replicas = [np.load(tmp_path / "run" / f) for f in sorted(os.listdir(tmp_path / "run"))]
    assert len(replicas) == 2
    for weights in replicas:
        for key in reference.files:
            np.testing.assert_allclose(weights[key], reference[key], rtol=1e-4, atol=1e-5)
