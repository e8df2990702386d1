"""A subclassed keras.Model holding a Conv2D and two Dense layers, trained with model.fit on arrays."""
import numpy as np
import keras


class Net(keras.Model):
    def __init__(self):
        super().__init__()
        self.conv = keras.layers.Conv2D(4, 3, activation="relu")
        self.flatten = keras.layers.Flatten()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.out = keras.layers.Dense(10)

    def call(self, x):
        return self.out(self.hidden(self.flatten(self.conv(x))))


rng = np.random.default_rng(1)
x = rng.random((64, 12, 12, 1), dtype=np.float32)
y = rng.integers(0, 10, 64)
model = Net()
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=16, epochs=1, verbose=0)
