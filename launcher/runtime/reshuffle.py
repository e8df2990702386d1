"""A tf.data ``shuffle(...).repeat()`` that reshuffles each repetition alike in every replica.

TensorFlow reshuffles each iteration of a shuffle (its default) with seeds
drawn from one generator per dataset each time an iterator of the shuffle
is made, and a ``repeat()`` makes one per repetition.  An iterator the
script has left (``for batch in data.take(1)`` to look at a batch, a
previous ``model.fit``'s) keeps repeating in its prefetch thread until it is
destroyed, drawing as many seeds as it had time to: the next iterator,
Keras' fit's, starts from another seed in each process, and the replicas
build different global batches even seeded alike.

Inside :func:`repeats_alike`, a ``repeat`` of a reshuffling shuffle draws
each repetition's seeds from a stream its own iterator holds (a
``Dataset.random`` seeded by the shuffle's seed), then shuffles that
repetition with them: every repetition is still shuffled anew, each new
iterator starts another stream, and what another iterator does draws
nothing from it.
"""

from __future__ import annotations

import contextlib
import functools

from autodist import hooks


@contextlib.contextmanager
def repeats_alike():
    """Inside: ``tf.data.Dataset.repeat`` of a reshuffling ``shuffle`` reshuffles each repetition from seeds of its
    own iterator (see the module); any other repeat as TensorFlow's."""

    def repeat(original, dataset, count, name):
        plain = original(dataset, count, name=name)
        seeds = _reshuffle_seed(dataset)
        if seeds is None:
            return plain
        return _reshuffled(dataset, seeds, count, plain.cardinality())

    with hooks.dataset_repeat(repeat):
        yield


def _reshuffle_seed(dataset):
    """The seed of ``dataset`` where it is an eager shuffle that reshuffles each iteration, else None."""
    from tensorflow.python.data.ops.shuffle_op import _ShuffleDataset

    if not isinstance(dataset, _ShuffleDataset) or dataset._reshuffle_each_iteration is False:
        return None
    try:
        return int(dataset._seed2)
    except TypeError:  # a shuffle built inside a tf.function: its seed is symbolic
        return None


def _reshuffled(shuffle, seed, count, cardinality):
    """``shuffle`` repeated ``count`` times (None: forever), each repetition shuffled with the next seed pair of a
    stream seeded with ``seed`` that each iterator draws anew; of the repeat's ``cardinality``."""
    import tensorflow as tf

    source, buffer_size, once_shuffled = shuffle._input_dataset, shuffle._buffer_size, _once_shuffled()
    pairs = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
    repeated = pairs.take(-1 if count is None else count).flat_map(
        lambda pair: once_shuffled(source, buffer_size, pair))
    if cardinality >= 0 or cardinality == tf.data.INFINITE_CARDINALITY:
        repeated = repeated.apply(tf.data.experimental.assert_cardinality(cardinality))
    return repeated


@functools.cache
def _once_shuffled():
    """The dataset class of a shuffle with a given seed pair (made on first use: TensorFlow is imported late)."""
    from tensorflow.python.data.ops import dataset_ops
    from tensorflow.python.ops import gen_dataset_ops

    class OnceShuffled(dataset_ops.UnaryUnchangedStructureDataset):
        """``source`` shuffled with the seed pair ``pair`` (two int64 tensors), the same order in every iterator."""

        def __init__(self, source, buffer_size, pair):
            self._input_dataset = source
            self._name = None
            variant = gen_dataset_ops.shuffle_dataset_v3(
                source._variant_tensor, buffer_size=buffer_size, seed=pair[0], seed2=pair[1],
                seed_generator=gen_dataset_ops.dummy_seed_generator(), reshuffle_each_iteration=False,
                **self._common_args)
            super().__init__(source, variant)

    return OnceShuffled

