"""A custom Layer holding a transformer block (attention, two LayerNorms, a feed-forward pair) in a functional model."""
import numpy as np
import keras


class TransformerBlock(keras.layers.Layer):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.attention = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=dim // heads)
        self.ffn = keras.Sequential([keras.layers.Dense(hidden, activation="relu"), keras.layers.Dense(dim)])
        self.norm1 = keras.layers.LayerNormalization()
        self.norm2 = keras.layers.LayerNormalization()

    def call(self, x):
        x = self.norm1(x + self.attention(x, x))
        return self.norm2(x + self.ffn(x))


inputs = keras.Input(shape=(8, 16))
h = TransformerBlock(16, 2, 32)(inputs)
outputs = keras.layers.Dense(2)(keras.layers.GlobalAveragePooling1D()(h))
model = keras.Model(inputs, outputs)
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
rng = np.random.default_rng(2)
model.fit(rng.random((64, 8, 16), dtype=np.float32), rng.integers(0, 2, 64), batch_size=16, epochs=1, verbose=0)
