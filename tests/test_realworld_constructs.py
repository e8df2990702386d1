"""Constructs of the corpus' scripts that stopped ``autodist run`` on two replicas, reproduced in scripts of our own.

- a MultiWorkerMirroredStrategy script that finds its chief through ``strategy.cluster_resolver``
  (tf_docs_distribute_multi_worker_with_keras): the strategy autodist substitutes had no resolver, so
  ``cluster_resolver.task_type`` raised AttributeError in every replica;
- a model with a string feature compiled with ``run_eagerly=True`` (tf_docs_structured_data_preprocessing_layers):
  the batch checksum cast strings to float, and the replica step ran its collectives eagerly.
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
