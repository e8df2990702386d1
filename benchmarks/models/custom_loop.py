"""A custom training loop in plain TensorFlow 2: raw ``tf.Variable``s, a ``tf.function`` step, a Keras optimizer.

Nothing in it mentions autodist: ``autodist capture`` and ``autodist run``
find its step because the step takes ``GradientTape`` gradients and applies
them with ``optimizer.apply_gradients``.  A two-layer regression MLP on
seeded synthetic data; ``--save-weights FILE`` writes the trained variables
(.npz, keyed by variable name) so that runs can be compared.
"""

import argparse
import os

import numpy as np
import tensorflow as tf
import keras

FEATURES, HIDDEN = 16, 32


def build_variables(seed):
    """The model's variables, named, with values fixed by ``seed`` alone."""
    def init(shape, k):
        return tf.random.stateless_normal(shape, seed=[seed, k]) * (2.0 / shape[0]) ** 0.5

    return [
        tf.Variable(init((FEATURES, HIDDEN), 1), name="hidden_kernel"),
        tf.Variable(tf.zeros([HIDDEN]), name="hidden_bias"),
        tf.Variable(init((HIDDEN, 1), 2), name="output_kernel"),
        tf.Variable(tf.zeros([1]), name="output_bias"),
    ]


def make_data(steps, batch_size, seed):
    """``steps`` batches of inputs and regression targets (a fixed noisy linear function of the inputs)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(steps * batch_size, FEATURES)).astype(np.float32)
    y = (x @ rng.normal(size=(FEATURES, 1)) + 0.1 * rng.normal(size=(len(x), 1))).astype(np.float32)
    return x, y


def make_train_step(variables, optimizer):
    """The training step as a ``tf.function``: forward, tape gradients, ``apply_gradients``."""
    hidden_kernel, hidden_bias, output_kernel, output_bias = variables

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            hidden = tf.nn.relu(tf.matmul(xb, hidden_kernel) + hidden_bias)
            prediction = tf.matmul(hidden, output_kernel) + output_bias
            loss = tf.reduce_mean(tf.square(prediction - yb))
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    return train_step


def train(steps, batch_size, seed, report=print):
    """Train for ``steps`` steps on the seeded data; returns the variables."""
    x, y = make_data(steps, batch_size, seed)
    variables = build_variables(seed)
    train_step = make_train_step(variables, keras.optimizers.Adam(0.01))
    for step in range(steps):
        rows = slice(step * batch_size, (step + 1) * batch_size)
        loss = train_step(x[rows], y[rows])
        report(f"step {step + 1}: loss {float(loss):.4f}")
    return variables


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-weights", help="write the trained variables to this .npz file")
    args = parser.parse_args()
    variables = train(args.steps, args.batch_size, args.seed)
    if args.save_weights:
        save_weights(args.save_weights, variables)


def save_weights(path, variables):
    """Write the variables to ``path`` whole (a temporary file, then a rename), as several processes may."""
    temporary = f"{path}.{os.getpid()}.npz"
    np.savez(temporary, **{v.name[:-2]: v.numpy() for v in variables})
    os.replace(temporary, path)


if __name__ == "__main__":
    main()
