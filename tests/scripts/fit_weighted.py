"""model.fit with class_weight and steps_per_epoch on a repeated dataset, and a second fit with sample weights."""
import numpy as np
import tensorflow as tf
import keras

rng = np.random.default_rng(11)
x = rng.random((128, 5)).astype(np.float32)
y = (x[:, 0] > 0.7).astype(np.int64)
model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
model.fit(data, epochs=2, steps_per_epoch=3, class_weight={0: 1.0, 1: 3.0}, verbose=0)
model.fit(x, y, batch_size=32, sample_weight=np.where(y == 1, 2.0, 1.0), epochs=1, verbose=0)
print("trained")
