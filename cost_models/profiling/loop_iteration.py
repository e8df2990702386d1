"""The harness that measures a loop iteration's control cost (cost_models.loop_iteration's record).

``autodist profile loop-iterations`` times, in its own process, a
``tf.function`` whose ``tf.while_loop`` carries a counter and V float32
[32, 64] tensors (one of them multiplied each iteration) for 2000 trips, V in
:data:`VARIABLES`, and fits ``seconds per iteration = base + per_variable *
(V + 1)``.
"""

from __future__ import annotations

import statistics
import time

from cost_models.calibration import fit_line
from cost_models.loop_iteration import LoopIterationCalibration
from cost_models.profiling.transfers import machine_description

VARIABLES = (2, 12, 22)
TRIPS = 2000


def _loop(variables):
    import tensorflow as tf

    @tf.function
    def loop(x):
        values = [x + i for i in range(variables)]

        def body(i, *values):
            return (i + 1, values[0] * 1.0001, *values[1:])

        return tf.while_loop(lambda i, *values: i < TRIPS, body, (tf.constant(0), *values))

    return loop


def measure(runs):
    """(loop variables, median seconds per iteration over ``runs`` loops) for each V of :data:`VARIABLES` (the
    counter counted)."""
    import tensorflow as tf

    rows = []
    x = tf.ones([32, 64])
    for variables in VARIABLES:
        loop = _loop(variables)
        loop(x)
        loop(x)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            loop(x)
            times.append(time.perf_counter() - start)
        rows.append((variables + 1, statistics.median(times) / TRIPS))
    return rows


def calibrate(runs=15, command=""):
    """The :class:`LoopIterationCalibration` of this machine."""
    rows = measure(runs)
    base, rate = fit_line([r[0] for r in rows], [r[1] for r in rows])  # seconds = base + variables / rate
    return LoopIterationCalibration(base=base, per_variable=1.0 / rate,
                                    measurements=[{"variables": v, "seconds_per_iteration": s} for v, s in rows],
                                    command=command, machine=machine_description())
