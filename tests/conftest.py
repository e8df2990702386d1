"""Shared fixtures: real training steps captured once per test session.

``mlp_graph``: a small Keras MLP trained with Adam (capture_step).
``cnn_graph``: a convolution feeding a large dense layer, trained with Adam.
``embedding_graph``: an Embedding of 10k rows + Dense trained with SGD, so the
embedding update stays sparse (capture_step).
``embedding_adam_graph``: the same model with Adam, which densifies it.
``resnet50_graph``: the zoo's ResNet-50 script (capture_script); slow tests only.
"""

import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(REPO, "benchmarks", "models")


def _keras_step(model, optimizer, loss_fn):
    import tensorflow as tf

    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


def capture_layers(layers, shape, env=None, policy="float32"):
    """A Keras model of ``layers`` over ``shape`` inputs (a pair ``(merge, branch)`` applies ``merge`` to the input
    and ``branch`` of it), then a Dense ReLU layer and 10 logits, its training step captured with the environment
    switches ``env`` set and the dtype ``policy``."""
    import keras
    import numpy as np

    from autodist.graph.capture import capture_step

    before = dict(os.environ)
    os.environ.update(env or {})
    keras.mixed_precision.set_global_policy(policy)
    try:
        inputs = keras.Input(shape)
        x = inputs
        for layer in layers(keras):
            x = layer(x) if not isinstance(layer, tuple) else layer[0](x, layer[1](x))
        x = keras.layers.Dense(16, activation="relu", name="dense")(keras.layers.Flatten()(x))
        model = keras.Model(inputs, keras.layers.Dense(10, dtype="float32", name="logits")(x))
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        step = _keras_step(model, keras.optimizers.SGD(0.1), loss)
        return capture_step(step, np.zeros((4, *shape), np.float32), np.zeros((4,), np.int32))
    finally:
        keras.mixed_precision.set_global_policy("float32")
        os.environ.clear()
        os.environ.update(before)


def build_mlp_step(batch_size=16):
    """A 32-64-10 MLP with Adam; returns (step, x, y, model)."""
    import keras
    import numpy as np

    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)],
        name="mlp",
    )
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    step = _keras_step(model, keras.optimizers.Adam(1e-3), loss)
    x = np.zeros((batch_size, 32), np.float32)
    y = np.zeros((batch_size,), np.int32)
    return step, x, y, model


def build_embedding_step(optimizer="sgd", rows=10_000, batch_size=8, seq=5):
    """Embedding(rows, 16) -> mean -> Dense(1); returns (step, ids, y, model)."""
    import keras
    import numpy as np

    model = keras.Sequential(
        [
            keras.Input((seq,), dtype="int32"),
            keras.layers.Embedding(rows, 16),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(1),
        ],
        name=f"embedding_{optimizer}",
    )
    opt = keras.optimizers.get({"class_name": optimizer, "config": {"learning_rate": 0.1}})
    step = _keras_step(model, opt, keras.losses.MeanSquaredError())
    ids = np.zeros((batch_size, seq), np.int32)
    y = np.zeros((batch_size, 1), np.float32)
    return step, ids, y, model


def build_cnn_step(batch_size=16):
    """A convolution, then a large dense layer (Adam): its gradient is ready first, its kernel read last;
    returns (step, x, y, model)."""
    import keras
    import numpy as np

    model = keras.Sequential(
        [
            keras.Input((16, 16, 16)),
            keras.layers.Conv2D(32, 3, padding="same", activation="relu", name="conv"),
            keras.layers.Flatten(),
            keras.layers.Dense(64, name="dense"),
        ],
        name="cnn",
    )
    step = _keras_step(model, keras.optimizers.Adam(1e-3), keras.losses.MeanSquaredError())
    x = np.zeros((batch_size, 16, 16, 16), np.float32)
    y = np.zeros((batch_size, 64), np.float32)
    return step, x, y, model


@pytest.fixture(scope="session")
def mlp_graph():
    from autodist.graph.capture import capture_step

    step, x, y, _ = build_mlp_step()
    return capture_step(step, x, y, model_name="mlp")


@pytest.fixture(scope="session")
def cnn_graph():
    from autodist.graph.capture import capture_step

    step, x, y, _ = build_cnn_step()
    return capture_step(step, x, y, model_name="cnn")


@pytest.fixture(scope="session")
def embedding_graph():
    from autodist.graph.capture import capture_step

    step, ids, y, _ = build_embedding_step("sgd")
    return capture_step(step, ids, y, model_name="embedding")


@pytest.fixture(scope="session")
def embedding_adam_graph():
    from autodist.graph.capture import capture_step

    step, ids, y, _ = build_embedding_step("adam")
    return capture_step(step, ids, y, model_name="embedding_adam")


@pytest.fixture(scope="session")
def resnet50_graph():
    """The zoo's ResNet-50 script captured with capture_script (batch 8)."""
    from autodist.graph.capture import capture_script

    return capture_script(os.path.join(ZOO, "resnet50.py"), ["--batch-size", "8"])


@pytest.fixture(scope="session")
def zoo_dir():
    return ZOO


def pytest_configure(config):
    # the zoo's helper module is importable for tests that build zoo models directly
    if ZOO not in sys.path:
        sys.path.append(ZOO)
