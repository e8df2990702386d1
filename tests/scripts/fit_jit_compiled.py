"""model.fit of a model compiled with jit_compile=True (keras_io_image_classification_from_scratch does), on seeded
arrays; the final weights go to ``argv[1].<pid>.npz``."""
import os
import sys

import numpy as np
import keras

rng = np.random.default_rng(8)
x = rng.random((64, 8), dtype=np.float32)
y = (x.sum(axis=1, keepdims=True) > 4).astype(np.float32)
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=True)
model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
np.savez(f"{sys.argv[1]}.{os.getpid()}.npz", *[w.numpy() for w in model.trainable_variables])
