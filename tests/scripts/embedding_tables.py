"""A recommender: a subclassed model with user, item and genre Embedding tables, trained with model.fit."""
import numpy as np
import keras


class Recommender(keras.Model):
    def __init__(self):
        super().__init__()
        self.users = keras.layers.Embedding(100, 8)
        self.items = keras.layers.Embedding(200, 8)
        self.genres = keras.layers.Embedding(20, 8)
        self.score = keras.layers.Dense(1)

    def call(self, ids):
        u, i, g = self.users(ids[:, 0]), self.items(ids[:, 1]), self.genres(ids[:, 2])
        return self.score(keras.ops.concatenate([u * i, g], axis=-1))


rng = np.random.default_rng(3)
ids = np.stack([rng.integers(0, 100, 64), rng.integers(0, 200, 64), rng.integers(0, 20, 64)], axis=1)
model = Recommender()
model.compile(optimizer="adam", loss="mse")
model.fit(ids, rng.random((64, 1), dtype=np.float32), batch_size=16, epochs=1, verbose=0)
