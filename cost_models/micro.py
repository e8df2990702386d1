"""Micro-benchmark cases: the main op types over a spread of shapes.

Each case is a python function of tensors (traced by cost_models.profiling)
plus the shapes and dtypes of its inputs.  Cases with a gradient compute it
with a tape inside the function, so backward ops (Conv2DBackpropInput,
BiasAddGrad, ReluGrad, MaxPoolGrad, ...) are timed at the same shapes.
"""

from __future__ import annotations

from dataclasses import dataclass


INT_INPUT_MAX = 1000  # the smallest gather table


@dataclass
class Case:
    name: str
    fn: object
    inputs: list  # [(shape, tf.DType)]; integer inputs are ids below INT_INPUT_MAX


def _with_grad(forward):
    """fn(x, w) running ``forward`` and its gradients w.r.t. both inputs."""
    import tensorflow as tf

    def fn(x, w):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            y = forward(x, w)
        return tape.gradient(y, [x, w])

    return fn


def _pick(rng, values):
    return int(values[rng.integers(len(values))])


def micro_cases(rng, scale=1):
    """Deterministic list of :class:`Case` drawn with ``rng`` (a numpy Generator)."""
    import tensorflow as tf

    f32 = tf.float32
    cases = []
    sizes = [16, 32, 64, 128, 256, 512, 1024]
    for i in range(24 * scale):
        m, k, n = (_pick(rng, sizes) for _ in range(3))
        cases.append(Case(f"matmul{i}", _with_grad(lambda x, w: tf.nn.relu(tf.matmul(x, w))),
                          [((m, k), f32), ((k, n), f32)]))
    for i in range(10 * scale):
        b, m, k = _pick(rng, [2, 4, 8, 16]), _pick(rng, [16, 64, 128, 256]), _pick(rng, [16, 32, 64, 128])
        cases.append(Case(f"batchmatmul{i}", _with_grad(lambda x, w: tf.linalg.matmul(x, w, transpose_b=True)),
                          [((b, m, k), f32), ((b, m, k), f32)]))
    for i in range(24 * scale):
        b, hw = _pick(rng, [1, 2, 4, 8]), _pick(rng, [7, 14, 28, 56])
        cin, cout, ks = _pick(rng, [3, 16, 32, 64, 128]), _pick(rng, [16, 32, 64, 128]), _pick(rng, [1, 3, 5])
        stride = 1 + (ks > 1 and _pick(rng, [0, 0, 1]))

        def conv(x, w, stride=stride):
            y = tf.nn.conv2d(x, w, stride, "SAME")
            y = tf.nn.bias_add(y, tf.reduce_mean(w, axis=[0, 1, 2]))
            return tf.nn.relu(y)

        cases.append(Case(f"conv{i}", _with_grad(conv), [((b, hw, hw, cin), f32), ((ks, ks, cin, cout), f32)]))
    for i in range(10 * scale):
        b, hw, c = _pick(rng, [2, 4, 8]), _pick(rng, [14, 28, 56]), _pick(rng, [16, 64, 128])

        def pool_norm(x, w):
            y = tf.nn.max_pool2d(x, 2, 2, "VALID") + tf.nn.avg_pool2d(x, 2, 2, "VALID")
            mean, var = tf.nn.moments(y, axes=[0, 1, 2])
            return tf.nn.batch_normalization(y, mean, var, w, w, 1e-3)

        cases.append(Case(f"pool{i}", _with_grad(pool_norm), [((b, hw, hw, c), f32), ((c,), f32)]))
    elementwise = [0, 1, 2, 3]
    for i in range(30 * scale):
        n = _pick(rng, [2**p for p in range(8, 23)])
        rows = _pick(rng, [1, 4, 16, 64])
        cols = max(n // rows, 1)
        kind = _pick(rng, elementwise)

        def elem(x, w, kind=kind):
            if kind == 0:
                return tf.reduce_sum(tf.tanh(x) * w + tf.sigmoid(x))
            if kind == 1:
                return tf.reduce_mean(tf.nn.softmax(x * w, axis=-1))
            if kind == 2:
                return tf.reduce_sum(tf.sqrt(tf.square(x) + 1.0) / (w + 2.0))
            return tf.reduce_max(tf.transpose(x) - tf.transpose(tf.cast(tf.cast(w, tf.float16), tf.float32)))

        cases.append(Case(f"elementwise{i}", _with_grad(elem), [((rows, cols), f32), ((rows, cols), f32)]))
    for i in range(12 * scale):
        vocab, dim, nids = _pick(rng, [1000, 10000, 100000]), _pick(rng, [16, 64, 256]), _pick(rng, [64, 512, 4096])

        def gather(table, ids):
            return tf.reduce_sum(tf.gather(table, ids))

        cases.append(Case(f"gather{i}", _with_grad_first(gather), [((vocab, dim), f32), ((nids,), tf.int32)]))
    return cases


def _with_grad_first(forward):
    """fn(x, ids) running ``forward`` and its gradient w.r.t. ``x`` only (sparse)."""
    import tensorflow as tf

    def fn(x, ids):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = forward(x, ids)
        grad = tape.gradient(y, x)
        return tf.math.unsorted_segment_sum(grad.values, grad.indices, tf.shape(x)[0])

    return fn
