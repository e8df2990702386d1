"""A CPU ring allreduce's price from the measured 2-task allreduce (cost_models.profiling.collectives measures it:
TensorFlow's ``CollectiveReduceV2`` between two worker processes over gRPC, stored as a
:class:`~cost_models.calibration.TransferCalibration`)."""


def ring_allreduce_seconds(two_task_seconds, nbytes, tasks):
    """Predicted seconds of a ring allreduce of ``nbytes`` over ``tasks`` worker processes.

    A ring makes ``2(n-1)`` steps of ``nbytes / n`` each; ``two_task_seconds(b)``,
    a measured 2-task allreduce of ``b`` bytes (over loopback, or an emulated
    link), is the two steps of a ring over ``b / 2``, so one step of ``c``
    bytes costs ``two_task_seconds(2c) / 2``.
    """
    if tasks < 2:
        return 0.0
    return (tasks - 1) * float(two_task_seconds(2.0 * nbytes / tasks))
