"""The one throughput definition: samples of the global batch per second.

The global batch is what one step trains on over every replica: the batch
the training script gives ``model.fit`` (or its step), which ``autodist run``
splits among the replicas.  ``placement report`` and ``autodist run`` both
count throughput this way.
"""


def samples_per_second(global_batch, step_time):
    """``global_batch / step_time``, or None when either is unknown or zero."""
    return global_batch / step_time if global_batch and step_time and step_time > 0 else None
