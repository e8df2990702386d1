"""The small MLP of run_small_mlp.py, fed to model.fit by a tf.data pipeline: a generator or TFRecord files.

``--input tfrecord`` writes the data set to TFRecord files of its own (in a
temporary folder, removed at the end) and reads them back with
``tf.data.TFRecordDataset``; ``--input generator`` wraps a Python generator
in ``tf.data.Dataset.from_generator``.  Either way the batches are the ones
``run_small_mlp.py`` trains on, in the same order, so the trained weights
equal plain Keras on arrays.  Runs as a plain script and under `autodist run`.
"""

import argparse
import os
import tempfile

import numpy as np
import tensorflow as tf
from run_small_mlp import build_model, make_data, trained_weights

import autodist


def write_tfrecords(x, y, folder, files):
    """``x`` and ``y`` as tf.train.Examples over ``files`` TFRecord files (consecutive rows per file)."""
    paths = []
    for k, rows in enumerate(np.array_split(np.arange(len(x)), files)):
        path = os.path.join(folder, f"part-{k:05d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for i in rows:
                features = {"ids": tf.train.Feature(int64_list=tf.train.Int64List(value=x[i])),
                            "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[y[i]]))}
                writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
        paths.append(path)
    return paths


def tfrecord_dataset(paths, batch_size):
    """Batches of (ids, label) read back from the files, in order."""
    schema = {"ids": tf.io.FixedLenFeature([4], tf.int64), "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(record):
        example = tf.io.parse_single_example(record, schema)
        return tf.cast(example["ids"], tf.int32), tf.cast(example["label"], tf.int32)

    return tf.data.TFRecordDataset(paths).map(parse).batch(batch_size)


def generator_dataset(x, y, batch_size):
    """Batches of (ids, label) from a Python generator over the rows."""

    def rows():
        yield from zip(x, y)

    signature = (tf.TensorSpec((4,), tf.int32), tf.TensorSpec((), tf.int32))
    return tf.data.Dataset.from_generator(rows, output_signature=signature).batch(batch_size)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--input", choices=("tfrecord", "generator"), default="tfrecord")
    parser.add_argument("--files", type=int, default=2, help="TFRecord files to write (default 2)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-weights", help="write the trained weights to this .npz file")
    args = parser.parse_args()
    x, y = make_data(args.steps, args.batch_size, args.seed)
    model = build_model(args.seed)
    with tempfile.TemporaryDirectory(prefix="tfdata-mlp-") as folder:
        if args.input == "tfrecord":
            dataset = tfrecord_dataset(write_tfrecords(x, y, folder, args.files), args.batch_size)
        else:
            dataset = generator_dataset(x, y, args.batch_size)
        model.fit(dataset, epochs=1, verbose=2)
    if args.save_weights and autodist.is_chief():
        np.savez(args.save_weights, **trained_weights(model))


if __name__ == "__main__":
    main()
