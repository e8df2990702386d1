"""capture_script: unchanged model.fit scripts, custom loops (plain tf.function steps, @autodist.function), failures."""

import os
import textwrap

import pytest

from autodist.errors import CaptureError
from autodist.graph.capture import capture_script, function

from tests.conftest import ZOO


def _script(tmp_path, body, name="train.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def _fit_is_unpatched():
    import keras
    import tensorflow as tf
    from keras.src.optimizers.base_optimizer import BaseOptimizer

    step_hook_gone = type(tf.function(lambda: None)).__call__.__module__.startswith("tensorflow")
    return "fit" not in vars(keras.Model) and step_hook_gone and BaseOptimizer.apply.__module__.startswith("keras")


@pytest.fixture(scope="module")
def mlp_script_graph():
    return capture_script(os.path.join(ZOO, "mlp.py"), ["--batch-size", "24"])


def test_fit_script_captures_the_real_model_and_batch(mlp_script_graph):
    item = mlp_script_graph
    assert _fit_is_unpatched()
    assert item.job.model_name == "mlp"
    assert item.job.batch_size == 24
    assert item.job.input_shapes == {"x": [24, 784], "y": [24]}
    assert item.job.step == "fit" and item.job.why_collective_only() is None
    assert item.job.optimizer == "Adam"
    shapes = sorted(v.shape for v in item.trainable_variables())
    assert shapes == sorted([[784, 512], [512], [512, 256], [256], [256, 10], [10]])
    model_params = 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10
    assert item.parameter_count() == model_params
    assert all(v.gradients and v.update_ops and len(v.slots) == 2 for v in item.trainable_variables())
    counts = item.ops_by_phase()
    assert counts["forward"] and counts["backward"] and counts["update"]


def test_fit_with_a_dataset_takes_its_batch_shape(tmp_path):
    path = _script(
        tmp_path,
        """
        import keras, numpy as np, tensorflow as tf
        x = np.ones((20, 6), np.float32); y = np.ones((20, 1), np.float32)
        data = tf.data.Dataset.from_tensor_slices((x, y)).batch(5)
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(data, epochs=3)
        raise SystemExit("fit should have stopped the script")
        """,
    )
    item = capture_script(path)
    assert item.job.batch_size == 5
    assert item.job.input_shapes == {"x": [5, 6], "y": [5, 1]}
    assert item.job.optimizer == "SGD"
    assert item.parameter_count() == 6 * 3 + 3 + 3 + 1
    assert _fit_is_unpatched()


def test_autodist_function_custom_loop_is_captured_with_its_arguments(tmp_path):
    path = _script(
        tmp_path,
        """
        import sys
        import keras, numpy as np, tensorflow as tf
        import autodist
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        opt = keras.optimizers.Adagrad()
        @autodist.function
        def step(features, labels):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(features) - labels) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        batch = int(sys.argv[sys.argv.index("--batch") + 1])
        for _ in range(3):
            step(np.ones((batch, 4), np.float32), np.ones((batch, 2), np.float32))
        raise RuntimeError("the step should have stopped the script")
        """,
        name="loop.py",
    )
    item = capture_script(path, ["--batch", "7"])
    assert item.job.model_name == "loop"
    assert item.job.batch_size == 7
    assert item.job.input_shapes == {"features": [7, 4], "labels": [7, 2]}
    assert item.job.optimizer == "Adagrad"
    assert len(item.trainable_variables()) == 2
    assert all(len(v.slots) == 1 for v in item.trainable_variables())  # Adagrad accumulator


def test_plain_tf_function_custom_loop_with_raw_variables_is_captured_unchanged():
    """The zoo's custom_loop.py: tf.Variables, a tf.function step, a Keras optimizer, no autodist in it."""
    item = capture_script(os.path.join(ZOO, "custom_loop.py"), ["--batch-size", "12"])
    assert item.job.step == "function" and item.job.collective_only
    assert item.job.model_name == "custom_loop"
    assert item.job.batch_size == 12
    assert item.job.input_shapes == {"xb": [12, 16], "yb": [12, 1]}
    assert item.job.optimizer == "Adam"
    names = sorted(v.name for v in item.trainable_variables())
    assert names == ["hidden_bias", "hidden_kernel", "output_bias", "output_kernel"]
    assert all(v.gradients and v.update_ops and len(v.slots) == 2 for v in item.trainable_variables())
    assert item.parameter_count() == 16 * 32 + 32 + 32 + 1
    assert _fit_is_unpatched()


def test_tf_functions_that_do_not_train_run_as_written_and_the_training_one_is_captured(tmp_path):
    path = _script(
        tmp_path,
        """
        import keras, numpy as np, tensorflow as tf
        w = tf.Variable(tf.ones((3, 1)), name="w")
        opt = keras.optimizers.SGD(0.1)

        @tf.function
        def normalise(x):
            return x / tf.reduce_max(x)

        @tf.function
        def evaluate(x):
            return tf.reduce_mean(tf.matmul(x, w))

        @tf.function
        def train(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.matmul(x, w))
            opt.apply_gradients([(tape.gradient(loss, w), w)])
            return loss

        x = normalise(np.full((8, 3), 4.0, np.float32))
        assert float(evaluate(x)) == 3.0, "a tf.function that does not train must run as written"
        train(x)
        raise RuntimeError("the step should have stopped the script")
        """,
    )
    item = capture_script(path)
    assert item.job.step == "function" and item.job.input_shapes == {"x": [8, 3]}
    assert [v.name for v in item.trainable_variables()] == ["w"]
    assert _fit_is_unpatched()


def test_tf_function_that_updates_without_an_optimizer_is_not_a_step(tmp_path):
    """Such a step must be marked with autodist.function; unmarked, the script ends without training."""
    path = _script(
        tmp_path,
        """
        import numpy as np, tensorflow as tf
        w = tf.Variable(tf.ones((3, 1)))

        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.matmul(x, w))
            w.assign_sub(0.1 * tape.gradient(loss, w))
            return loss

        step(np.ones((4, 3), np.float32))
        """,
    )
    with pytest.raises(CaptureError, match="without training.*autodist.function"):
        capture_script(path)
    assert _fit_is_unpatched()


def test_an_eager_loop_is_named_where_it_applies_gradients_and_told_what_to_wrap(tmp_path):
    """tensorflow/docs' custom training walkthrough trains eagerly: a tape and apply_gradients in the loop's body, no
    tf.function.  Nothing can be traced; capture said only that the script finished without training."""
    path = _script(
        tmp_path,
        """
        import numpy as np, tensorflow as tf
        model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2)])
        optimizer = tf.keras.optimizers.SGD(0.1)
        for x in [np.ones((4, 3), np.float32)] * 2:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        """,
    )
    with pytest.raises(CaptureError) as info:
        capture_script(path)
    message = str(info.value)
    assert f"{path}:9" in message and "eagerly" in message and "@tf.function" in message and "\n" not in message
    assert _fit_is_unpatched()


def test_a_fit_of_a_model_whose_variables_keras_does_not_track_is_refused(tmp_path):
    """tensorflow/docs' basic_training_loops fits a keras.Model holding raw ``tf.Variable`` attributes: Keras 3 tracks
    none of them, warns "The model does not have any trainable weights" and fits on, training nothing.  Capture
    refused it for the two variables' shared name ('Variable'), which naming them would not have fixed."""
    path = _script(
        tmp_path,
        """
        import numpy as np, tensorflow as tf

        class MyModelKeras(tf.keras.Model):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.w = tf.Variable(5.0)
                self.b = tf.Variable(0.0)

            def call(self, x):
                return self.w * x + self.b

        model = MyModelKeras()
        model.compile(optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), loss=tf.keras.losses.mse)
        x = np.random.default_rng(0).normal(size=(64,)).astype(np.float32)
        model.fit(x, 3 * x + 2, epochs=1, batch_size=16, verbose=0)
        """,
    )
    with pytest.raises(CaptureError, match=r"model.fit trains nothing: Keras tracks no trainable weight of model "
                                           r"'my_model_keras' .*self.add_weight") as info:
        capture_script(path)
    fit_line = next(i for i, line in enumerate(open(path).read().splitlines(), 1) if "model.fit(" in line)
    assert info.value.source == f"{path}:{fit_line}"
    assert _fit_is_unpatched()


def test_autodist_function_outside_capture_is_a_tf_function():
    import numpy as np
    import tensorflow as tf

    calls = []

    @function
    def double(x):
        calls.append(1)  # runs only while tracing
        return x * 2

    out = double(tf.constant([1.0, 2.0]))
    double(tf.constant([3.0, 4.0]))
    np.testing.assert_allclose(out.numpy(), [2.0, 4.0])
    assert len(calls) == 1  # traced once, then reused like tf.function
    assert double.__name__ == "double"
    assert double.get_concrete_function(tf.TensorSpec([2], tf.float32)) is not None


def test_missing_script(tmp_path):
    with pytest.raises(CaptureError, match="no such script"):
        capture_script(tmp_path / "absent.py")


def test_script_that_raises_shows_its_error_and_line(tmp_path):
    path = _script(tmp_path, "x = 1\nraise ValueError('bad learning rate\\nsecond line')\n")
    with pytest.raises(CaptureError) as info:
        capture_script(path)
    message = str(info.value)
    assert f"{path}:2" in message and "ValueError: bad learning rate" in message
    assert "\n" not in message
    assert _fit_is_unpatched()


def test_script_that_never_trains(tmp_path):
    path = _script(tmp_path, "print('hello')\n")
    with pytest.raises(CaptureError, match="without training"):
        capture_script(path)
    assert _fit_is_unpatched()


def test_script_that_exits_with_an_error_status(tmp_path):
    path = _script(tmp_path, "import sys\nsys.exit(3)\n")
    with pytest.raises(CaptureError, match="status 3"):
        capture_script(path)


def test_fit_on_an_uncompiled_model(tmp_path):
    path = _script(
        tmp_path,
        """
        import keras, numpy as np
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.fit(np.ones((4, 3)), np.ones((4, 1)))
        """,
    )
    with pytest.raises(CaptureError, match="not compiled"):
        capture_script(path)
    assert _fit_is_unpatched()


def test_step_that_fails_to_trace(tmp_path):
    path = _script(
        tmp_path,
        """
        import numpy as np, tensorflow as tf, autodist
        @autodist.function
        def step(x):
            return tf.matmul(x, tf.ones((5, 2)))
        step(np.ones((2, 3), np.float32))
        """,
    )
    with pytest.raises(CaptureError, match="tracing the step failed"):
        capture_script(path)


@pytest.mark.parametrize("decorator", ["autodist.function", "tf.function"])
def test_step_on_a_method_is_captured(tmp_path, decorator):
    path = _script(
        tmp_path,
        f"""
        import keras, numpy as np, tensorflow as tf
        import autodist

        class Trainer:
            def __init__(self):
                self.model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
                self.optimizer = keras.optimizers.SGD()

            @{decorator}
            def step(self, x):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_sum(self.model(x))
                grads = tape.gradient(loss, self.model.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))
                return loss

        trainer = Trainer()  # a tf.function method holds its instance weakly
        trainer.step(np.ones((6, 3), np.float32))
        """,
    )
    item = capture_script(path)
    assert item.job.input_shapes == {"x": [6, 3]}
    assert item.job.batch_size == 6
    assert item.parameter_count() == 3 * 2 + 2
    assert all(v.gradients and v.update_ops for v in item.trainable_variables())


def test_a_script_that_asks_for_another_keras_backend_is_told_it_runs_on_tensorflow(tmp_path, capsys):
    """keras-io's Keras 3 examples set KERAS_BACKEND (ViT: "jax") before importing Keras; under autodist Keras is
    already imported on TensorFlow, so the variable changes nothing: one line says so, and the variable is
    restored."""
    path = _script(tmp_path, """
        import os

        os.environ["KERAS_BACKEND"] = "jax"

        import keras
        import numpy as np

        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(np.zeros((8, 3), np.float32), np.zeros((8, 1), np.float32), batch_size=4, verbose=0)
    """)
    before = os.environ.get("KERAS_BACKEND")
    item = capture_script(path)
    err = capsys.readouterr().err
    assert f"{path} sets KERAS_BACKEND=jax, but Keras was imported on tensorflow" in err
    assert item.job.batch_size == 4 and os.environ.get("KERAS_BACKEND") == before
