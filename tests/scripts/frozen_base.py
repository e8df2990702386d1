"""Transfer learning's first phase: a frozen base (base.trainable = False) under a trainable head, fit."""
import numpy as np
import keras

base = keras.Sequential([keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(32)])
base.trainable = False
inputs = keras.Input((8,))
model = keras.Model(inputs, keras.layers.Dense(1)(base(inputs, training=False)))
model.compile(optimizer="adam", loss="mse")
rng = np.random.default_rng(12)
model.fit(rng.random((64, 8), dtype=np.float32), rng.random((64, 1), dtype=np.float32), batch_size=16, verbose=0)
