"""The first batch a ``model.fit`` call would train on, from the arguments it got."""

from __future__ import annotations

from autodist.errors import CaptureError

DEFAULT_BATCH_SIZE = 32  # Keras' model.fit default


def is_batched(value):
    """Whether ``value`` is an array or tensor with a leading (batch) dimension: what a step's batch is made of."""
    import numpy as np
    import tensorflow as tf

    return isinstance(value, (tf.Tensor, np.ndarray)) and len(value.shape) >= 1


def _rows(value, batch_size):
    import tensorflow as tf

    return tf.nest.map_structure(lambda a: a[:batch_size], value)


def first_batch(x, y=None, sample_weight=None, batch_size=None, source=None):
    """One batch in the structure Keras' fit gives ``train_step``, and the names of its parts.

    Parameters
    ----------
    x : array, tensor, dict/list of them, tf.data.Dataset, keras.utils.PyDataset or iterator
    y, sample_weight : optional arrays (only with array-like ``x``)
    batch_size : int, optional
        Rows per batch for array-like ``x`` (default 32, as Keras).
    source : str, optional
        Named in errors.

    Returns
    -------
    (object, list of str)
        ``(x, y[, sample_weight])`` of one batch and the names of its parts;
        without targets, ``x`` alone (a tuple ``(x,)`` where ``x`` is a list
        or tuple), as Keras packs it, named ``["x"]``.
    """
    import keras
    import tensorflow as tf

    if x is None:
        raise CaptureError("model.fit was called without training data", source=source)
    if isinstance(x, tf.data.Dataset):
        element = next(iter(x.take(1)), None)
    elif isinstance(x, keras.utils.PyDataset):
        element = x[0] if len(x) else None
    elif hasattr(x, "__next__"):
        element = next(x, None)
    else:
        size = batch_size or DEFAULT_BATCH_SIZE
        parts = [_rows(x, size)]
        if y is not None:
            parts.append(_rows(y, size))
            if sample_weight is not None:
                parts.append(_rows(sample_weight, size))
        if len(parts) == 1 and not isinstance(parts[0], (list, tuple)):
            return parts[0], ["x"]
        return tuple(parts), ["x", "y", "sample_weight"][: len(parts)]
    if element is None:
        raise CaptureError("model.fit was given an empty dataset", source=source)
    if not isinstance(element, tuple):
        return element, ["x"]
    return element, ["x", "y", "sample_weight"][: len(element)]
