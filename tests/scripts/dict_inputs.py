"""A functional model with named inputs (a dict), trained with model.fit on a tf.data dataset of (features, label)."""
import numpy as np
import tensorflow as tf
import keras

rng = np.random.default_rng(7)
features = {"ids": rng.integers(0, 50, (128, 4)), "numeric": rng.random((128, 3), dtype=np.float32)}
labels = rng.integers(0, 2, (128, 1)).astype(np.float32)
ids = keras.Input((4,), name="ids", dtype="int64")
numbers = keras.Input((3,), name="numeric")
pooled = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(50, 8)(ids))
h = keras.layers.Dense(16, activation="relu")(keras.layers.concatenate([pooled, numbers]))
model = keras.Model({"ids": ids, "numeric": numbers}, keras.layers.Dense(1)(h))
model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(from_logits=True))
data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(32)
model.fit(data, epochs=2, verbose=0)
