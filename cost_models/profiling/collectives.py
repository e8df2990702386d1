"""TensorFlow collective calibration: what one CPU ring allreduce costs here.

TensorFlow's CPU collectives (``CollectiveReduceV2``, ring, between worker
processes over gRPC) are much slower than its point-to-point transfers: they
move the tensor in chunks, one RPC each, and reduce on the CPU cores the
workers share.  So an allreduce over loopback is calibrated on its own: two
worker processes join a collective group the way ``autodist run`` does
(``MultiWorkerMirroredStrategy``'s constructor), and time one allreduce of a
float32 tensor of each size.  The result is a
:class:`~cost_models.calibration.TransferCalibration` (the seconds of one
2-task allreduce against its bytes) stored as data beside the transfer
calibration.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

from autodist.errors import CostModelError
from cost_models.calibration import TransferCalibration, fit_line
from cost_models.profiling.transfers import SIZES, free_port, machine_description


def _worker(cluster, index, sizes, repeats):
    """One of the two worker processes: join the group, time every size, print the medians (task 0)."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="worker", task_id=index, rpc_layer="grpc")
    tf.distribute.MultiWorkerMirroredStrategy(
        cluster_resolver=resolver,
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING))

    def allreduce_of(key):
        @tf.function
        def allreduce(x):
            return tf.raw_ops.CollectiveReduceV2(input=x, group_size=2, group_key=1, instance_key=key,
                                                 ordering_token=[], merge_op="Add", final_op="Id",
                                                 communication_hint="ring")

        return allreduce

    barrier, token = allreduce_of(len(sizes) + 1), tf.ones([1])
    functions = []
    for key, nbytes in enumerate(sizes, start=1):
        allreduce, x = allreduce_of(key), tf.ones([max(nbytes // 4, 1)], tf.float32)
        allreduce(x).numpy()  # warm-up: traces and resolves the group
        functions.append((nbytes, allreduce, x))
    times = {nbytes: [] for nbytes in sizes}
    # Rounds over all sizes, so that a change in load touches every size alike.  A
    # tiny untimed allreduce first lines the two processes up, so that one's lag
    # from the size before is not timed.
    for _ in range(repeats):
        for nbytes, allreduce, x in functions:
            barrier(token).numpy()
            start = time.perf_counter()
            allreduce(x).numpy()
            times[nbytes].append(time.perf_counter() - start)
    if index == 0:
        print(json.dumps([{"bytes": int(n), "seconds": statistics.median(t), "repeats": len(t)}
                          for n, t in times.items()]), flush=True)


def measure_collectives(sizes=SIZES, repeats=15, time_limit_s=300.0, cluster=None, prefixes=((), ())):
    """Median seconds of one 2-task ring allreduce of each size (list of ``{"bytes", "seconds", "repeats"}``).

    The two worker processes serve ``cluster`` (two loopback ports unless given) and run as ``prefixes[i] + argv``
    (in an emulated node's namespace, say).
    """
    cluster = cluster or {"worker": [f"localhost:{free_port()}", f"localhost:{free_port()}"]}
    argv = [sys.executable, "-m", "cost_models.profiling.collectives", json.dumps(cluster), json.dumps(list(sizes)),
            str(repeats)]
    workers = [subprocess.Popen([*prefixes[i], *argv, str(i)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
               for i in range(2)]
    try:
        out, err = workers[0].communicate(timeout=time_limit_s + 120)
        workers[1].wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise CostModelError("the collective calibration did not finish in time") from None
    finally:
        for w in workers:
            w.kill()
            w.wait()
    if workers[0].returncode != 0 or not out.strip():
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise CostModelError(f"the collective calibration worker failed: {last}")
    return json.loads(out.strip().splitlines()[-1])


def calibrate_collectives(sizes=SIZES, repeats=15, command=""):
    """Measure and fit; returns a :class:`TransferCalibration` of 2-task allreduces between two processes as
    this machine runs them (unpinned), with the same sizes timed with both pinned to one core (``shared_core``:
    two replicas on an emulated node of one core, CommModel's ``_taking_turns``)."""
    points = measure_collectives(sizes, repeats)
    one_core = ["taskset", "-c", str(min(os.sched_getaffinity(0)))]
    shared = measure_collectives(sizes, repeats, prefixes=(one_core, one_core))
    overhead, bandwidth = fit_line([p["bytes"] for p in points], [p["seconds"] for p in points])
    return TransferCalibration(overhead, bandwidth, points, command, machine_description(), shared)


if __name__ == "__main__":
    _cluster, _sizes, _repeats, _index = sys.argv[1:5]
    _worker(json.loads(_cluster), int(_index), json.loads(_sizes), int(_repeats))
