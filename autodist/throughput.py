"""The one throughput definition: samples of the global batch per second.

The global batch is what one step trains on over every replica: the batch
the training script gives ``model.fit`` (or its step), which ``autodist run``
splits among the replicas.  ``placement report`` and ``autodist run`` both
count throughput this way.  A step time measured over many steps leaves
out the first :data:`EXECUTOR_SETTLE_RUNS`, in the runtime and in profiling
alike.
"""

# TensorFlow's executor starts every kernel's cost estimate at 100M cycles and
# moves it a tenth of the way to each run's cycles; a kernel whose estimate
# falls below 8,000 cycles runs inline on the thread that readied it, with no
# thread-pool hand-off and no profiler event (KernelStats in
# tensorflow/core/common_runtime/executor.cc).  From 100M, a sub-8,000-cycle
# kernel crosses after about 90 runs.  Measured here: mlp's profile traced
# 205 kernels in its first 10 steps and 39 after 110 steps.
EXECUTOR_SETTLE_RUNS = 100


def samples_per_second(global_batch, step_time):
    """``global_batch / step_time``, or None when either is unknown or zero."""
    return global_batch / step_time if global_batch and step_time and step_time > 0 else None
