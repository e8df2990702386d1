"""model.fit on NumPy arrays with shuffle=False, sample weights and a validation split, batches of ``argv[2]``
(default 8); the final weights go to ``argv[1].<pid>.npz``."""
import os
import sys

import numpy as np
import keras

rng = np.random.default_rng(11)
x = rng.random((100, 8), dtype=np.float32)
y = (x.sum(axis=1, keepdims=True) > 4).astype(np.float32)
weights = rng.random(100, dtype=np.float32) + 0.5
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
model.fit(x, y, batch_size=int(sys.argv[2]) if len(sys.argv) > 2 else 8, epochs=2, verbose=0, shuffle=False,
          sample_weight=weights, validation_split=0.2)
np.savez(f"{sys.argv[1]}.{os.getpid()}.npz", *[w.numpy() for w in model.trainable_variables])
