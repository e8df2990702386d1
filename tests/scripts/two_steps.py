"""Two custom-loop phases: a tf.function step trains a classifier at batch 16, then another step trains a second
model at batch 32 (a GAN after a classifier, in tutorials)."""
import numpy as np
import tensorflow as tf
import keras

rng = np.random.default_rng(13)
x = rng.random((64, 8), dtype=np.float32)
y = rng.integers(0, 2, 64)
first = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(2)])
second = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
opt1, opt2 = keras.optimizers.Adam(), keras.optimizers.SGD(0.1)


@tf.function
def classifier_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = loss_fn(yb, first(xb, training=True))
    opt1.apply_gradients(zip(tape.gradient(loss, first.trainable_variables), first.trainable_variables))
    return loss


@tf.function
def regressor_step(xb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(second(xb, training=True)))
    opt2.apply_gradients(zip(tape.gradient(loss, second.trainable_variables), second.trainable_variables))
    return loss


for start in range(0, 64, 16):
    classifier_step(x[start:start + 16], y[start:start + 16])
for start in range(0, 64, 32):
    regressor_step(x[start:start + 32])
print("second phase trained")
