"""Two replicas train a script that shuffles unseeded: ``model.fit`` on arrays (Keras' default shuffle=True) and a
tf.data pipeline with an unseeded ``shuffle``.

Every replica seeds its random generators alike before the script runs
(``launcher.runtime.client.seed_replica``), so both draw the same
permutation and build the same global batches; before, each replica drew
its own and the run stopped ("the replicas built different global
batches").  The weights after training equal the script run by plain
Keras in one process under the same seed (``keras.utils.set_random_seed``).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from tests.plan_runs import captured, ring_plan

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")
REFERENCE = ("import runpy, sys, keras; keras.utils.set_random_seed(0); sys.argv = sys.argv[1:]; "
             "runpy.run_path(sys.argv[0], run_name='__main__')")

# The same, with the runtime's repeat of a reshuffling shuffle (launcher.runtime.reshuffle) installed.
REFERENCE_REPEATS = ("import runpy, sys, keras; from launcher.runtime import reshuffle; "
                     "keras.utils.set_random_seed(0); sys.argv = sys.argv[1:]\n"
                     "with reshuffle.repeats_alike(): runpy.run_path(sys.argv[0], run_name='__main__')")


def _weights(prefix):
    """The weights files the script wrote with ``prefix`` (one per process that ran it)."""
    folder, base = os.path.split(prefix)
    return [dict(np.load(os.path.join(folder, f))) for f in sorted(os.listdir(folder)) if f.startswith(base + ".")]


def _trains_as_one_process(script, reference_code, tmp_path):
    """``autodist run`` of ``script`` on a two-replica ring plan: both replicas' weights equal ``reference_code``
    running the script in one process."""
    plan = ring_plan(captured(script, tmp_path, [str(tmp_path / "unused")]), tmp_path / "plan.json")
    (tmp_path / "run").mkdir()
    (tmp_path / "one").mkdir()
    done = subprocess.run([sys.executable, "-m", "autodist", "run", script, "--plan", plan, "--",
                           str(tmp_path / "run" / "w")], capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    reference = subprocess.run([sys.executable, "-c", reference_code, script, str(tmp_path / "one" / "w")],
                               capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert reference.returncode == 0, reference.stderr[-2000:]
    replicas, (single,) = _weights(str(tmp_path / "run" / "w")), _weights(str(tmp_path / "one" / "w"))
    assert len(replicas) == 2
    for weights in replicas:
        for key in single:
            np.testing.assert_allclose(weights[key], single[key], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["fit_default_shuffle", "tfdata_unseeded_shuffle"])
def test_two_replicas_train_an_unseeded_shuffle_as_one_process_does(name, tmp_path):
    _trains_as_one_process(os.path.join(SCRIPTS, f"{name}.py"), REFERENCE, tmp_path)


@pytest.mark.slow
def test_two_replicas_train_a_repeated_shuffle_a_batch_was_looked_at_in(tmp_path):
    """TensorFlow's imbalanced-data tutorial: ``shuffle(n).repeat()`` batched and prefetched, a batch looked at before
    ``model.fit``.  The looked-at iterator kept drawing reshuffle seeds in its prefetch thread for as long as it
    lived, so each replica's fit started from another seed ("the replicas built different global batches"); the
    replicas now train alike, as one process running the script under the runtime's repeat
    (``launcher.runtime.reshuffle``)."""
    _trains_as_one_process(os.path.join(SCRIPTS, "tfdata_peeked_repeat.py"), REFERENCE_REPEATS, tmp_path)
