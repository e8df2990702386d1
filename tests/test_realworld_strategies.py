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


# tensorflow/docs distribute/custom_training.ipynb's last cell: a whole epoch in one tf.function, looping over the
# distributed dataset and calling strategy.run(train_step) for each batch.
EPOCH_IN_ONE_FUNCTION = """
import numpy as np
import tensorflow as tf
import keras

strategy = tf.distribute.MirroredStrategy()
rng = np.random.default_rng(0)
data = tf.data.Dataset.from_tensor_slices((rng.random((64, 4), dtype=np.float32),
                                           rng.random((64, 1), dtype=np.float32))).batch(16)
dist_data = strategy.experimental_distribute_dataset(data)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam()

def train_step(inputs):
    x, y = inputs
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x, training=True) - y))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss

@tf.function
def train_epoch(dataset):
    total = 0.0
    for x in dataset:
        total += strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(train_step, args=(x,)), axis=None)
    return total

train_epoch(dist_data)
"""


def test_a_step_that_loops_over_a_dataset_is_refused_naming_its_call(tmp_path):
    """Before, capture took the epoch's tf.function as one step of batch size 0 (21 ops: the loop's body hidden in
    the dataset's reduce), and a run's replicas failed inside its trace with a traceback."""
    import pytest

    from autodist.errors import CaptureError
    from autodist.graph.capture import capture_script

    script = tmp_path / "epoch.py"
    script.write_text(EPOCH_IN_ONE_FUNCTION)
    with pytest.raises(CaptureError, match=r"train_epoch takes a tf.data dataset and loops over it inside one "
                                           r"tf.function .* once per batch") as caught:
        capture_script(str(script))
    call = EPOCH_IN_ONE_FUNCTION.splitlines().index("train_epoch(dist_data)") + 1
    assert caught.value.source == f"{script}:{call}"


def test_a_step_given_an_iterator_is_refused_and_one_given_a_batch_beside_its_dataset_is_not():
    import numpy as np
    import pytest
    import tensorflow as tf

    from autodist.errors import LaunchError
    from autodist.loops.function import refuse_unbatched

    data = tf.data.Dataset.range(4).batch(2)
    with pytest.raises(LaunchError, match="once per batch"):
        refuse_unbatched(len, (iter(data),), {}, "s.py:1", LaunchError)
    refuse_unbatched(len, (data, np.zeros((2, 3))), {}, "s.py:1", LaunchError)


STYLE_TRANSFER = """
import numpy as np
import tensorflow as tf

image = tf.Variable(np.random.default_rng(0).random((1, 8, 8, 3), dtype=np.float32))
target = tf.constant(np.random.default_rng(1).random((1, 8, 8, 3), dtype=np.float32))
opt = tf.keras.optimizers.Adam(learning_rate=0.02)

@tf.function()
def train_step(image):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean((image - target) ** 2)
    grad = tape.gradient(loss, image)
    opt.apply_gradients([(grad, image)])
    image.assign(tf.clip_by_value(image, 0.0, 1.0))

train_step(image)
"""


def test_a_step_that_trains_the_variable_it_is_given_is_refused_naming_it(tmp_path):
    """tensorflow/docs' style transfer trains an image: ``train_step(image)`` with ``image`` a ``tf.Variable``, no
    batch.  Capture traced the variable as a tensor spec and failed inside the optimizer ("'SymbolicTensor' object has
    no attribute '_unique_id'"); read from the closure instead, it was captured with batch size 0 and ``autodist run``
    failed in the search with a traceback ("the step's batch size is unknown")."""
    import pytest

    from autodist.errors import CaptureError
    from autodist.graph.capture import capture_script

    script = tmp_path / "style.py"
    script.write_text(STYLE_TRANSFER)
    with pytest.raises(CaptureError, match=r"train_step is given no batch \(only tf.Variable 'Variable:0', which it "
                                           r"trains\)") as caught:
        capture_script(str(script))
    assert caught.value.source == f"{script}:{STYLE_TRANSFER.splitlines().index('train_step(image)') + 1}"
    script.write_text(STYLE_TRANSFER.replace("def train_step(image):", "def train_step():")
                      .replace("train_step(image)", "train_step()"))
    with pytest.raises(CaptureError, match=r"train_step is given no batch \(no tensor or array\)"):
        capture_script(str(script))
    script.write_text(STYLE_TRANSFER.replace("def train_step(image):", "def train_step(image, target):")
                      .replace("train_step(image)", "train_step(image, target)"))
    with pytest.raises(CaptureError, match=r"the step is given trainable tf.Variable 'Variable:0' as an argument"):
        capture_script(str(script))  # with a batch beside it: autodist syncs the variables of the model or closure
