"""A custom loop over a tf.data pipeline that does not shuffle, batches of ``argv[2]`` (default 8), each replica
reading its own shard (``autodist.replica_count()``/``replica_rank()``, Horovod's way) unless ``argv[3]`` is
``unsharded``; the final weights go to ``argv[1].<pid>.npz``."""
import os
import sys

import numpy as np
import tensorflow as tf
import keras

import autodist

rng = np.random.default_rng(13)
x = rng.random((96, 8), dtype=np.float32)
y = (x.sum(axis=1, keepdims=True) > 4).astype(np.float32)
data = tf.data.Dataset.from_tensor_slices((x, y))
if sys.argv[3:] != ["unsharded"]:
    data = data.shard(autodist.replica_count(), autodist.replica_rank())
data = data.batch(int(sys.argv[2]) if len(sys.argv) > 2 else 8)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
optimizer = keras.optimizers.SGD(0.05)


@tf.function
def train_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xb) - yb))
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss


for xb, yb in data:
    train_step(xb, yb)
np.savez(f"{sys.argv[1]}.{os.getpid()}.npz", *[w.numpy() for w in model.trainable_variables])
