"""A custom loop that writes its batch into a shape (multi-head attention split by hand), one SGD step.

Weights start from constants and the data is drawn unseeded, so a replica's batch is whatever its random
generators give; the trained weights go to ``argv[1].<pid>.npz``.
"""
import os
import sys

import numpy as np
import tensorflow as tf
import keras

BATCH, SEQ, HEADS, DEPTH = 8, 6, 2, 4
WIDTH = HEADS * DEPTH

project = keras.layers.Dense(WIDTH, kernel_initializer="ones", bias_initializer="zeros")
score = keras.layers.Dense(1, kernel_initializer=keras.initializers.Constant(0.1))
project.build((None, SEQ, WIDTH))
score.build((None, SEQ * WIDTH))
optimizer = keras.optimizers.SGD(0.05)
variables = project.trainable_variables + score.trainable_variables


@tf.function
def train_step(x, y):
    with tf.GradientTape() as tape:
        h = project(x)
        heads = tf.reshape(h, [BATCH, SEQ, HEADS, DEPTH])  # the batch, written into the shape
        mixed = tf.transpose(tf.nn.softmax(heads, axis=-1), [0, 2, 1, 3])
        out = score(tf.reshape(mixed, [BATCH, SEQ * WIDTH]))
        loss = tf.reduce_mean(tf.square(out[:, 0] - y))
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss


x = np.random.random((BATCH, SEQ, WIDTH)).astype(np.float32)
y = np.random.random((BATCH,)).astype(np.float32)
print(f"loss {float(train_step(x, y)):.5f}")
np.savez(f"{sys.argv[1]}.{os.getpid()}.npz", *[v.numpy() for v in variables])
