"""Two training phases: a classifier fit at batch 16, then another model, not built before its fit, fit at batch 32
(as tutorials do)."""
import numpy as np
import keras

rng = np.random.default_rng(10)
x = rng.random((64, 8), dtype=np.float32)
y = rng.integers(0, 2, 64)
first = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
first.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
first.fit(x, y, batch_size=16, epochs=1, verbose=0)
second = keras.Sequential([keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])  # built by its fit
second.compile(optimizer="sgd", loss="mse")
second.fit(x, y.astype(np.float32), batch_size=32, epochs=2, verbose=0)
print("second phase trained")
