"""TensorFlow's canonical custom loop: a subclassed model, tf.data, GradientTape and apply_gradients in a tf.function."""
import numpy as np
import tensorflow as tf
import keras


class MyModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.conv1 = keras.layers.Conv2D(4, 3, activation="relu")
        self.flatten = keras.layers.Flatten()
        self.d1 = keras.layers.Dense(16, activation="relu")
        self.d2 = keras.layers.Dense(10)

    def call(self, x):
        return self.d2(self.d1(self.flatten(self.conv1(x))))


rng = np.random.default_rng(4)
images = rng.random((64, 12, 12, 1), dtype=np.float32)
labels = rng.integers(0, 10, 64)
train_ds = tf.data.Dataset.from_tensor_slices((images, labels)).batch(16)
model = MyModel()
loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
optimizer = keras.optimizers.Adam()
train_loss = keras.metrics.Mean(name="train_loss")


@tf.function
def train_step(images, labels):
    with tf.GradientTape() as tape:
        predictions = model(images, training=True)
        loss = loss_object(labels, predictions)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    train_loss(loss)
    return loss


for epoch in range(2):
    train_loss.reset_state()
    for images_batch, labels_batch in train_ds:
        train_step(images_batch, labels_batch)
    print(f"epoch {epoch + 1} loss {float(train_loss.result()):.4f}")
