"""Summing one flat tensor per replica across replicas inside one client's step graph.

Used by plans that run from one client (hybrid PS + allreduce plans, tasks
with several replicas): TensorFlow 2.21 refuses collective ops in a client
that also runs ops on remote tasks ("Cannot enable remote execution as well
as collective ops at the moment", ``tensorflow/python/eager/context.py``),
so there the algorithms are ordinary ops pinned to the replica devices, and
TensorFlow's runtime moves every chunk between tasks (gRPC between
processes, device copies inside one).  Every replica ends with bit-identical
sums.  Plans that allreduce everything run on real collective ops instead
(:mod:`launcher.runtime.collective`).
"""

from __future__ import annotations

from autodist.strategy import WIRE_DTYPES


def _chunk_sizes(length, parts):
    return [length * (i + 1) // parts - length * i // parts for i in range(parts)]


def ring_allreduce(tensors, devices):
    """Ring reduce-scatter then ring all-gather of 1-D tensors.

    Parameters
    ----------
    tensors : list of tf.Tensor
        One 1-D tensor per replica, all of the same static length.
    devices : list of str
        The device of each replica.

    Returns
    -------
    list of tf.Tensor, the sum, one per device.
    """
    import tensorflow as tf

    n = len(devices)
    if n == 1:
        return list(tensors)
    sizes = _chunk_sizes(int(tensors[0].shape[0]), n)
    chunks = []
    for t, dev in zip(tensors, devices):
        with tf.device(dev):
            chunks.append(list(tf.split(t, sizes)))
    # Reduce-scatter: at round s, replica i passes chunk (i - s) to replica i + 1.
    for s in range(n - 1):
        sent = [(i, (i - s) % n, chunks[i][(i - s) % n]) for i in range(n)]
        for i, c, value in sent:
            j = (i + 1) % n
            with tf.device(devices[j]):
                chunks[j][c] = tf.add(chunks[j][c], value, name="ring_reduce")
    # Replica i now holds the full sum of chunk (i + 1) % n; all-gather passes it on.
    for s in range(n - 1):
        sent = [(i, (i + 1 - s) % n, chunks[i][(i + 1 - s) % n]) for i in range(n)]
        for i, c, value in sent:
            j = (i + 1) % n
            with tf.device(devices[j]):
                chunks[j][c] = tf.identity(value, name="ring_gather")
    out = []
    for dev, parts in zip(devices, chunks):
        with tf.device(dev):
            out.append(tf.concat(parts, axis=0))
    return out


def master_allreduce(tensors, devices):
    """Sum on the first device, then copy the sum to every other one."""
    import tensorflow as tf

    with tf.device(devices[0]):
        total = tf.add_n(list(tensors), name="master_reduce")
    out = []
    for dev in devices:
        with tf.device(dev):
            out.append(tf.identity(total, name="master_broadcast"))
    return out


def hierarchical_allreduce(tensors, devices, nodes):
    """Sum inside each node on its first replica, ring between nodes, copy back inside."""
    import tensorflow as tf

    members = {}
    for i, node in enumerate(nodes):
        members.setdefault(node, []).append(i)
    leaders = [group[0] for group in members.values()]
    partial = []
    for group in members.values():
        with tf.device(devices[group[0]]):
            partial.append(tf.add_n([tensors[i] for i in group], name="node_reduce"))
    sums = ring_allreduce(partial, [devices[i] for i in leaders])
    out = [None] * len(devices)
    for total, group in zip(sums, members.values()):
        for i in group:
            with tf.device(devices[i]):
                out[i] = tf.identity(total, name="node_broadcast")
    return out


def allreduce(tensors, devices, nodes, algorithm, compression="none"):
    """Dispatch to the planned algorithm (``ring``, ``master`` or ``hierarchical``).

    A ``compression`` other than ``none`` sums float tensors wider than 16
    bits as float16 or bfloat16: each replica casts its tensor before the
    algorithm and the sum back after, on its own device.
    """
    import tensorflow as tf

    dtype = tf.as_dtype(tensors[0].dtype)
    if compression == "none" or not dtype.is_floating or dtype.size <= 2:
        return _dispatch(tensors, devices, nodes, algorithm)
    wire = tf.as_dtype(WIRE_DTYPES[compression])
    sums = _dispatch(_cast_on(tensors, devices, wire, "compress"), devices, nodes, algorithm)
    return _cast_on(sums, devices, dtype, "decompress")


def _cast_on(tensors, devices, dtype, name):
    import tensorflow as tf

    out = []
    for t, dev in zip(tensors, devices):
        with tf.device(dev):
            out.append(tf.cast(t, dtype, name=name))
    return out


def _dispatch(tensors, devices, nodes, algorithm):
    if algorithm == "master":
        return master_allreduce(tensors, devices)
    if algorithm == "hierarchical":
        return hierarchical_allreduce(tensors, devices, nodes)
    return ring_allreduce(tensors, devices)
