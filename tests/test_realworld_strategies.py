"""Scripts that already distribute: a model built and compiled under ``MirroredStrategy``'s scope, fit on tf.data.

Capture and run make the strategy TensorFlow's default one (one replica,
a no-op scope; :func:`autodist.hooks.single_replica_strategies`) and say so
in one line; before, capture stopped with "Need to be inside with
strategy.scope()" (or "ValueError: in user code:" with the cause cut).
"""

import os
import subprocess
import sys

from tests.plan_runs import captured, ring_plan

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "mirrored_fit.py")


def test_mirrored_strategy_script_is_captured_as_one_replica(capsys):
    import tensorflow as tf

    from autodist.graph.capture import capture_script

    item = capture_script(SCRIPT)
    out = capsys.readouterr().out
    assert "the script's MirroredStrategy runs as one replica" in out and "Number of devices: 1" in out
    assert (len(item.trainable_variables()), item.parameter_count()) == (4, 8 * 16 + 16 + 16 * 2 + 2)
    assert item.job.batch_size == 16
    assert type(tf.distribute.MirroredStrategy()).__name__ == "MirroredStrategy"  # restored after capture


def test_mirrored_strategy_script_trains_on_two_replicas(tmp_path):

    plan = ring_plan(captured(SCRIPT, tmp_path), tmp_path / "plan.json")
    done = subprocess.run([sys.executable, "-m", "autodist", "run", SCRIPT, "--plan", plan],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "MirroredStrategy runs as one replica" in done.stdout and "step 16" in done.stdout
