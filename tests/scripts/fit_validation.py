"""model.fit with validation data as tutorials pass it: validation_split, then validation_data and validation_freq."""
import numpy as np
import keras

rng = np.random.default_rng(11)
x = rng.random((80, 8), dtype=np.float32)
y = (x.sum(axis=1) > 4).astype(np.float32)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse", metrics=["mae"])
split = model.fit(x, y, batch_size=16, epochs=2, validation_split=0.2, verbose=0)
given = model.fit(x[:64], y[:64], batch_size=16, epochs=2, validation_data=(x[64:], y[64:]), validation_freq=2,
                  verbose=0)
print("history", sorted(split.history), len(split.history["val_loss"]), len(given.history.get("val_loss", [])))
