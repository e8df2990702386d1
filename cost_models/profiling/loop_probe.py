"""The trivial training job whose step cost_models.remote_step times to measure a training loop's fixed cost.

One Dense unit on 4 features, batch 8, plain SGD: its ops take
microseconds, so a step of it is mostly the loop that drives it.  Run as a
script (``python loop_probe.py --loop fit|function --steps N``), it is an
ordinary training script that capture can read, so the cost model can
price the ops of the very step that was timed (remote_step subtracts them).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

BATCH = 8
FEATURES = 4
LOOPS = ("fit", "function")


def _model():
    import keras

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model


def fit_step_ends(steps):
    """``perf_counter`` times at which each of ``steps`` steps of ``model.fit`` ended (callbacks see the same)."""
    import keras

    model, ends = _model(), []

    class BatchEnds(keras.callbacks.Callback):
        def on_train_batch_end(self, index, logs=None):
            ends.append(time.perf_counter())

    x, y = np.zeros((BATCH * steps, FEATURES), np.float32), np.zeros((BATCH * steps, 1), np.float32)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[BatchEnds()])
    return ends


def function_step_seconds(steps):
    """Seconds of each of ``steps`` calls of a ``tf.function`` step (GradientTape, ``apply_gradients``), timed
    around the call and the read of its loss."""
    import keras
    import tensorflow as tf

    model, optimizer = _model(), keras.optimizers.SGD(0.01)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    xb, yb = tf.zeros((BATCH, FEATURES)), tf.zeros((BATCH, 1))
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        float(step(xb, yb))
        times.append(time.perf_counter() - t0)
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", choices=LOOPS, required=True)
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args(argv)
    (fit_step_ends if args.loop == "fit" else function_step_seconds)(args.steps)


if __name__ == "__main__":
    main()
