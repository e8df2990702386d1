"""Batch norm as TensorFlow's fused kernel, as NVIDIA's TensorFlow 1 ResNets run it.

Keras 3 computes batch norm from primitive ops (moments, then a chain of
elementwise ops, each a kernel of its own without XLA).  NVIDIA's TensorFlow 1
convolutional examples use ``tf.compat.v1.layers.batch_normalization(fused=True)``:
one ``FusedBatchNormV3`` kernel forward and one ``FusedBatchNormGradV3``
backward.  ``--fused-batch-norm`` builds the zoo's image models that way, so
that the graph autodist captures is the one those published runs executed.
"""

import keras
import tensorflow as tf


class FusedBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` (NHWC, last axis) trained with ``FusedBatchNormV3``."""

    def call(self, inputs, training=None, mask=None):
        if not training or self.axis not in (-1, len(inputs.shape) - 1) or len(inputs.shape) != 4:
            return super().call(inputs, training=training, mask=mask)
        y, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            inputs, tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta), epsilon=self.epsilon,
            data_format="NHWC", is_training=True)
        for average, batch in ((self.moving_mean, mean), (self.moving_variance, variance)):
            average.assign(average * self.momentum + tf.cast(batch, average.dtype) * (1.0 - self.momentum))
        return y


def with_fused_batch_norm(model):
    """``model`` rebuilt with every BatchNormalization as a :class:`FusedBatchNormalization` (fresh weights)."""

    def clone(layer):
        if type(layer) is keras.layers.BatchNormalization:
            return FusedBatchNormalization.from_config(layer.get_config())
        return layer.__class__.from_config(layer.get_config())

    return keras.models.clone_model(model, clone_function=clone)
