"""Batch norm as TensorFlow's fused kernel, as NVIDIA's TensorFlow 1 ResNets run it.

Keras 3 computes batch norm from primitive ops (moments, then a chain of
elementwise ops, each a kernel of its own without XLA).  NVIDIA's TensorFlow 1
convolutional examples use ``tf.compat.v1.layers.batch_normalization(fused=True)``:
one ``FusedBatchNormV3`` kernel forward and one ``FusedBatchNormGradV3``
backward.  ``--fused-batch-norm`` builds the zoo's image models that way, so
that the graph autodist captures is the one those published runs executed:
their convolutions have no bias before a batch norm (NVIDIA
DeepLearningExamples, TensorFlow/Classification/ConvNets/model/blocks/
conv2d_block.py: ``use_bias=not use_batch_norm``).  Their runner turns on
cuDNN's persistent batch norm (``TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT``,
runtime/runner.py), under which TensorFlow fuses a float16 NHWC batch norm
with its Relu; they computed in NCHW (utils/cmdline_helper.py:
``--data_format`` defaults to NCHW), where it fuses none in training, so the
switch is left off here (cost_models.gpu_remapper).
"""

import keras
import tensorflow as tf


class FusedBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` (NHWC, last axis) trained with ``FusedBatchNormV3``."""

    def call(self, inputs, training=None, mask=None):
        if not training or self.axis not in (-1, len(inputs.shape) - 1) or len(inputs.shape) != 4:
            return super().call(inputs, training=training, mask=mask)
        channels = inputs.shape[-1]
        # Layers built with scale=False or center=False (Inception-v3's) have no gamma or beta: the kernel takes 1s, 0s.
        gamma = tf.convert_to_tensor(self.gamma) if self.scale else tf.ones((channels,), self.variable_dtype)
        beta = tf.convert_to_tensor(self.beta) if self.center else tf.zeros((channels,), self.variable_dtype)
        y, mean, variance = tf.compat.v1.nn.fused_batch_norm(
            inputs, gamma, beta, epsilon=self.epsilon, data_format="NHWC", is_training=True)
        for average, batch in ((self.moving_mean, mean), (self.moving_variance, variance)):
            average.assign(average * self.momentum + tf.cast(batch, average.dtype) * (1.0 - self.momentum))
        return y


def with_fused_batch_norm(model):
    """``model`` rebuilt with every BatchNormalization as a :class:`FusedBatchNormalization` and every Conv2D
    without a bias (fresh weights; each of the zoo's convolutions feeds a batch norm)."""

    def clone(layer):
        if type(layer) is keras.layers.BatchNormalization:
            return FusedBatchNormalization.from_config(layer.get_config())
        if type(layer) is keras.layers.Conv2D:
            return keras.layers.Conv2D.from_config({**layer.get_config(), "use_bias": False})
        return layer.__class__.from_config(layer.get_config())

    return keras.models.clone_model(model, clone_function=clone)
