"""Shared pieces of the zoo scripts: command-line options and synthetic data.

Every zoo script trains offline on random data (fixed seed) so that it runs
anywhere; ``--steps`` and ``--batch-size`` size the run, and
``--mixed-precision`` trains under Keras' ``mixed_float16`` policy (float16
compute, float32 variables), as published mixed-precision runs do;
``--amp-graph-rewrite`` trains the float32 model under TensorFlow's automatic
mixed precision graph rewrite instead (autodist.graph.amp_rewrite).
"""

import argparse

import numpy as np


def parse_args(description, batch_size, steps=2, argv=None, seq_len=None, rows=None, batch_norm=False):
    """Parse ``--steps``, ``--batch-size``, ``--seed``, ``--mixed-precision`` and ``--amp-graph-rewrite``
    (``--seq-len`` and ``--gelu`` if ``seq_len``, ``--rows`` if ``rows``, ``--fused-batch-norm`` if
    ``batch_norm``: see fused_bn).

    ``--mixed-precision`` sets Keras' global dtype policy to ``mixed_float16``
    before the script builds its model; ``--amp-graph-rewrite`` turns on
    TensorFlow's ``auto_mixed_precision`` graph optimizer.
    """
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=steps, help="training steps to run")
    parser.add_argument("--batch-size", type=int, default=batch_size, help="global batch size")
    parser.add_argument("--seed", type=int, default=0)
    precision = parser.add_mutually_exclusive_group()
    precision.add_argument("--mixed-precision", action="store_true",
                           help="train under the mixed_float16 policy (float16 compute, float32 variables)")
    precision.add_argument("--amp-graph-rewrite", action="store_true",
                           help="train the float32 model under TensorFlow's automatic mixed precision graph rewrite "
                                "(float16 on GPUs, as NVIDIA's TensorFlow 1 examples ran AMP)")
    if seq_len is not None:
        parser.add_argument("--seq-len", type=int, default=seq_len, help="tokens per sequence")
        parser.add_argument("--gelu", choices=("erf", "tanh"), default="erf",
                            help="GELU exact (erf, Keras' default) or its tanh approximation (Google's and NVIDIA's "
                                 "TensorFlow BERT)")
    if rows is not None:
        parser.add_argument("--rows", type=int, default=rows, help="rows of each embedding table")
    if batch_norm:
        parser.add_argument("--fused-batch-norm", action="store_true",
                            help="batch norm as TensorFlow's FusedBatchNormV3 kernel, as NVIDIA's TensorFlow 1 "
                                 "ResNets run it (Keras 3: primitive ops)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1 or getattr(args, "seq_len", 1) < 1 or getattr(args, "rows", 1) < 1:
        parser.error("--steps, --batch-size, --seq-len and --rows must be positive")
    if args.mixed_precision:
        import keras

        keras.mixed_precision.set_global_policy("mixed_float16")
    if args.amp_graph_rewrite:
        import tensorflow as tf

        tf.config.optimizer.set_experimental_options({"auto_mixed_precision": True})
    return args


def images(n, shape, classes, seed=0):
    """``n`` random images of ``shape`` (float32 in [0, 1)) and integer labels."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, *shape), dtype=np.float32)
    y = rng.integers(0, classes, size=(n,), dtype=np.int32)
    return x, y


def tokens(n, seq_len, vocab, seed=0):
    """``n`` random token sequences of ``seq_len`` ids below ``vocab`` (int32)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab, size=(n, seq_len), dtype=np.int32)


def ids(n, columns, rows, seed=0):
    """``n`` rows of ``columns`` categorical ids below ``rows`` (int32)."""
    return tokens(n, columns, rows, seed)


def binary_labels(n, seed=0):
    rng = np.random.default_rng(seed + 1)
    return rng.integers(0, 2, size=(n, 1)).astype(np.float32)
