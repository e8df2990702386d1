"""A MultiWorkerMirroredStrategy script that writes its result only on its chief, found through the strategy's
cluster resolver; the chief's weights go to ``argv[1].npz``."""
import os
import sys

import numpy as np
import tensorflow as tf
import keras

strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
data = np.random.default_rng(3).random((64, 7)).astype(np.float32)
model.fit(data[:, :6], data[:, 6:], batch_size=16, epochs=1, verbose=0)
resolver = strategy.cluster_resolver
if resolver.task_type in (None, "worker") and resolver.task_id in (None, 0):
    os.makedirs(os.path.dirname(sys.argv[1]), exist_ok=True)
    np.savez(f"{sys.argv[1]}.npz", *[w.numpy() for w in model.trainable_variables])
