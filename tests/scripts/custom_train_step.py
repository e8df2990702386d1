"""A subclassed Model overriding train_step (a tape, apply_gradients, Mean trackers through a metrics property),
fit without targets, as keras.io's VAE does."""
import numpy as np
import tensorflow as tf
import keras


class AutoEncoder(keras.Model):
    def __init__(self):
        super().__init__()
        self.encoder = keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
        self.decoder = keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(16)])
        self.loss_tracker = keras.metrics.Mean(name="loss")

    @property
    def metrics(self):
        return [self.loss_tracker]

    def call(self, x):
        return self.decoder(self.encoder(x))

    def train_step(self, data):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.reduce_sum(tf.square(data - self(data)), axis=1))
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.loss_tracker.update_state(loss)
        return {"loss": self.loss_tracker.result()}


model = AutoEncoder()
model.compile(optimizer="adam")
x = np.random.default_rng(9).random((64, 16), dtype=np.float32)
model.fit(x, epochs=1, batch_size=16, verbose=0)
