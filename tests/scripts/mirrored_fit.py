"""A script that already distributes: model built and compiled under MirroredStrategy's scope, trained with fit."""
import numpy as np
import tensorflow as tf
import keras

strategy = tf.distribute.MirroredStrategy()
print(f"Number of devices: {strategy.num_replicas_in_sync}")
batch_size = 16 * strategy.num_replicas_in_sync
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
rng = np.random.default_rng(8)
data = tf.data.Dataset.from_tensor_slices((rng.random((128, 8), dtype=np.float32), rng.integers(0, 2, 128)))
model.fit(data.batch(batch_size), epochs=2, verbose=0)
