"""A functional model on a dict of features, one of them strings (StringLookup, then one-hot), trained on a
dataset of (features, label) with ``run_eagerly=True``."""
import numpy as np
import tensorflow as tf
import keras

rng = np.random.default_rng(8)
colours = rng.choice(["red", "green", "blue"], 96)[:, None]
sizes = rng.random((96, 1)).astype(np.float32)
labels = (sizes[:, 0] > 0.5).astype(np.float32)
lookup = keras.layers.StringLookup(vocabulary=["red", "green", "blue"], output_mode="one_hot")
colour_in = keras.Input((1,), dtype="string", name="colour")
size_in = keras.Input((1,), name="size")
hidden = keras.layers.Dense(8, activation="relu")(keras.layers.concatenate([lookup(colour_in), size_in]))
model = keras.Model({"colour": colour_in, "size": size_in}, keras.layers.Dense(1)(hidden))
model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(from_logits=True), run_eagerly=True)
data = tf.data.Dataset.from_tensor_slices(({"colour": colours, "size": sizes}, labels)).batch(16)
model.fit(data, epochs=2, verbose=0)
print("trained")
