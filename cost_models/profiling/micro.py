"""Micro-benchmark cases: the main op types over a spread of shapes.

Each case is a python function of tensors (traced by cost_models.profiling)
plus the shapes and dtypes of its inputs.  Cases with a gradient compute it
with a tape inside the function, so backward ops (Conv2DBackpropInput,
BiasAddGrad, ReluGrad, MaxPoolGrad, ...) are timed at the same shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, field


INT_INPUT_MAX = 1000  # the smallest gather table and vocabulary: integer inputs' default bound


@dataclass
class Case:
    name: str
    fn: object
    inputs: list  # [(shape, tf.DType)]; integer inputs are ids below id_bound
    variables: list = field(default_factory=list)  # float32 variable shapes, passed before the inputs
    # Ids range over a whole table (as a model's do), not only its first rows, which stay in cache.
    id_bound: int = INT_INPUT_MAX


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
    for i in range(12 * scale):
        # Attention's batched matmuls: (batch, heads, tokens, head size), scores then weighted values.
        b, h = _pick(rng, [1, 2, 4, 8]), _pick(rng, [4, 8, 12, 16])
        t, d = _pick(rng, [64, 128, 256, 512]), _pick(rng, [32, 64, 128])
        cases.append(Case(f"attention{i}", _with_grad(_attention), [((b, h, t, d), f32), ((b, h, t, d), f32)]))
    for i in range(8 * scale):
        # Keras MultiHeadAttention's einsums over (batch, tokens, heads, head size): TensorFlow's Einsum
        # kernel transposes its operands around a batched matmul, so it runs slower than BatchMatMulV2.
        b, t = _pick(rng, [1, 2, 4]), _pick(rng, [64, 128, 256, 512])
        h, d = _pick(rng, [4, 8, 12]), _pick(rng, [32, 64, 128])
        cases.append(Case(f"einsum{i}", _with_grad(_einsum_attention), [((b, t, h, d), f32), ((b, t, h, d), f32)]))
    for i in range(12 * scale):
        # A dense layer over a sequence: (batch, tokens, features) times a shared
        # weight, a broadcasting batched matmul, as Keras runs Dense on 3-d inputs.
        b, t = _pick(rng, [1, 2, 4, 8]), _pick(rng, [64, 128, 256, 512])
        d, n = (_pick(rng, [128, 256, 512, 768, 1024]) for _ in range(2))
        cases.append(Case(f"seqdense{i}", _with_grad(lambda x, w: tf.matmul(x, w)), [((b, t, d), f32), ((d, n), f32)]))
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
        cases.append(Case(f"gather{i}", _with_grad_first(_gather_sum), [((vocab, dim), f32), ((nids,), tf.int32)],
                          id_bound=vocab))
    cases += _large_cases(rng, scale)
    return cases


def _large_cases(rng, scale):
    """Shapes as large as the zoo's: optimizer updates of big variables, 1M-row
    tables (and dense reads of them after sparse updates of up to 8k ids),
    64M-element elementwise ops, 224-pixel and asymmetric (1x7) convolutions,
    token-sized, vocabulary-wide and wide dense layers, losses over a
    language model's vocabulary.  Trees
    do not extrapolate well, so the data must reach these sizes."""
    import tensorflow as tf

    f32 = tf.float32
    cases = []
    for i in range(10 * scale):
        n = _pick(rng, [2**p for p in range(10, 27, 2)])
        cols = _pick(rng, [64, 256, 1024]) if n >= 1024 else n
        shape = (max(n // cols, 1), cols)
        cases.append(Case(f"adam{i}", _adam_update, [(shape, f32)], variables=[shape] * 3))
    for i in range(6 * scale):
        n = _pick(rng, [2**p for p in range(22, 27)])
        shape = (n // 64, 64)
        cases.append(Case(f"checks{i}", _finite_checks, [(shape, f32), (shape, f32)]))
    for i in range(8 * scale):
        b, hw = _pick(rng, [1, 2]), _pick(rng, [112, 224])
        cin, cout = _pick(rng, [3, 64, 128]), _pick(rng, [64, 128])
        cases.append(Case(f"bigconv{i}", _with_grad(_relu_conv), [((b, hw, hw, cin), f32), ((3, 3, cin, cout), f32)]))
    kernels = [(1, 7), (7, 1), (1, 3), (3, 1), (3, 3), (5, 5), (1, 1)]
    for i in range(16 * scale):
        b, hw = _pick(rng, [1, 2]), _pick(rng, [8, 17, 35, 73, 147])
        cin, cout = _pick(rng, [32, 64, 128, 192, 384, 768]), _pick(rng, [32, 64, 128, 192, 384])
        kh, kw = kernels[rng.integers(len(kernels))]
        cases.append(Case(f"asymconv{i}", _with_grad(_relu_conv), [((b, hw, hw, cin), f32), ((kh, kw, cin, cout), f32)]))
    for i in range(16 * scale):
        m = _pick(rng, [256, 512, 1024, 2048])
        k, n = (_pick(rng, [256, 512, 768, 1024, 2048, 3072, 4096]) for _ in range(2))
        cases.append(Case(f"tokenmatmul{i}", _with_grad(lambda x, w: tf.matmul(x, w)), [((m, k), f32), ((k, n), f32)]))
    for i in range(4 * scale):
        # A language model's output layer: tokens times (model width x vocabulary).
        m, k, n = _pick(rng, [128, 256, 512]), _pick(rng, [128, 256, 512]), _pick(rng, [8000, 16000, 30522])
        cases.append(Case(f"vocabmatmul{i}", _with_grad(lambda x, w: tf.nn.relu(tf.matmul(x, w))),
                          [((m, k), f32), ((k, n), f32)]))
    for i in range(6 * scale):
        m, k, n = _pick(rng, [2, 8, 64]), _pick(rng, [4096, 9216, 25088]), _pick(rng, [1000, 4096])
        cases.append(Case(f"bigmatmul{i}", _with_grad(lambda x, w: tf.nn.relu(tf.matmul(x, w))),
                          [((m, k), f32), ((k, n), f32)]))
    for i in range(4 * scale):
        tokens, vocab = _pick(rng, [64, 256, 512, 2048]), _pick(rng, [INT_INPUT_MAX, 8000, 30522])
        cases.append(Case(f"crossentropy{i}", _cross_entropy_grad, [((tokens, vocab), f32), ((tokens,), tf.int32)],
                          id_bound=vocab))
    for i in range(12 * scale):
        rows, dim = _pick(rng, [10_000, 100_000, 1_000_000]), _pick(rng, [1, 16, 32, 64])
        nids = _pick(rng, [256, 2048, 8192])  # a batch's ids, or several features' ids, per sparse update
        cases.append(Case(f"copyonread{i}", _scatter_then_read, [((nids,), tf.int32), ((nids, dim), f32)],
                          variables=[(rows, dim)], id_bound=rows))
    for i in range(4 * scale):
        dim, nids = _pick(rng, [16, 64]), _pick(rng, [256, 4096])
        cases.append(Case(f"biggather{i}", _with_grad_first(_gather_sum), [((1_000_000, dim), f32), ((nids,), tf.int32)],
                          id_bound=1_000_000))
    return cases


def _relu_conv(x, w):
    """A stride-1, same-padded convolution and its ReLU."""
    import tensorflow as tf

    return tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))


def _gather_sum(table, ids):
    """The sum of the rows ``ids`` of ``table`` (an embedding lookup)."""
    import tensorflow as tf

    return tf.reduce_sum(tf.gather(table, ids))


def _adam_update(var, m, v, grad):
    """One Adam step written as Keras 3 writes it (separate assign ops, not fused)."""
    import tensorflow as tf

    m.assign_add((grad - m) * 0.1)
    v.assign_add((tf.square(grad) - v) * 0.001)
    var.assign_sub(m * 0.001 / (tf.sqrt(v) + 1e-7))
    return tf.reduce_sum(var)


def _attention(q, k):
    """Scores ``q k^T`` and the values they weight (``k`` doubles as the values)."""
    import tensorflow as tf

    return tf.linalg.matmul(tf.nn.softmax(tf.linalg.matmul(q, k, transpose_b=True)), k)


def _einsum_attention(q, k):
    """Multi-head attention as Keras writes it: scores ``aecd,abcd->acbe``, then ``acbe,aecd->abcd`` over
    the values (``k`` doubles as the values)."""
    import tensorflow as tf

    scores = tf.nn.softmax(tf.einsum("aecd,abcd->acbe", k, q))
    return tf.einsum("acbe,aecd->abcd", scores, k)


def _cross_entropy_grad(logits, labels):
    """A language model's loss over its vocabulary (one label per token) and the loss's gradient."""
    import tensorflow as tf

    with tf.GradientTape() as tape:
        tape.watch(logits)
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
    return tape.gradient(loss, logits)


def _scatter_then_read(table, ids, rows):
    """A sparse update (which makes ``table`` copy-on-read) and a dense read of it."""
    import tensorflow as tf

    table.scatter_add(tf.IndexedSlices(rows, ids))
    return tf.reduce_sum(table.read_value())


def _finite_checks(x, w):
    """Element-wise tests over large tensors (the finite-gradient checks of Keras optimizers)."""
    import tensorflow as tf

    return tf.reduce_any(tf.logical_or(tf.math.is_nan(x), tf.equal(x, w)))


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
