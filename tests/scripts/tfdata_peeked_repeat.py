"""A tf.data pipeline as TensorFlow's imbalanced-data tutorial builds it: arrays, an unseeded shuffle that reshuffles
each repetition of a repeat(), batched and prefetched; a batch looked at a few times before model.fit (steps_per_epoch,
validation data, class weights).  The final weights go to argv[1]."""
import os
import sys

import numpy as np
import tensorflow as tf
import keras

rng = np.random.default_rng(7)
x = rng.random((6, 8), dtype=np.float32)
y = np.array([[0], [1], [0], [0], [1], [0]], dtype=np.float32)
data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(100).repeat().batch(8192).prefetch(2)
for look in range(3):
    for features, labels in data.take(1):
        print("positive share of a batch:", float(labels.numpy().mean()))
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(1, activation="sigmoid")])
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="binary_crossentropy")
model.fit(data, epochs=2, steps_per_epoch=3, validation_data=(x, y), class_weight={0: 0.6, 1: 1.5}, verbose=0)
np.savez(f"{sys.argv[1]}.{os.getpid()}.npz", *[w.numpy() for w in model.trainable_variables])
