"""The harness that measures TensorFlow transfers (cost_models.calibration's record).

Real transfers between two processes on this machine over loopback gRPC (a
``tf.distribute.Server`` per process, v1 graph mode), in fresh processes;
:func:`calibrate` fits ``seconds = overhead + bytes / bandwidth`` on them.
"""

from __future__ import annotations

import contextlib
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

from autodist.errors import CostModelError
from cost_models.calibration import TransferCalibration, fit_line
from cost_models.profiling.fresh_process import run_json

SIZES = tuple(4096 * 4**k for k in range(8))  # 4 KiB .. 64 MiB


def machine_description():
    """CPU model, core count and Python/TensorFlow versions, for provenance."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "python": platform.python_version(), "os": platform.platform()}


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


_SERVER_SCRIPT = """
import sys, tensorflow as tf
cluster = tf.train.ClusterSpec({"worker": [sys.argv[1]], "ps": [sys.argv[2]]})
server = tf.distribute.Server(cluster, job_name="ps", task_index=0, protocol="grpc")
print("ready", flush=True)
server.join()
"""


def measure_transfers(sizes=SIZES, repeats=15, time_limit_s=240.0):
    """Median seconds of moving one float32 tensor of each size between processes.

    A PS server process holds one variable per size; this process, a worker
    server, reads it into an op placed on the worker.  The same graph with the
    variable on the worker is timed too, and the difference (transfer minus
    local) is the transfer's cost.

    Returns
    -------
    list of dict ``{"bytes", "seconds", "repeats"}``
    """
    worker_addr, ps_addr = f"localhost:{free_port()}", f"localhost:{free_port()}"
    with ps_server(worker_addr, ps_addr):
        return time_transfers(worker_addr, ps_addr, sizes, repeats, time_limit_s)


@contextlib.contextmanager
def ps_server(worker_addr, ps_addr, prefix=()):
    """A PS server process at ``ps_addr`` for :func:`time_transfers` (run as ``prefix + argv``), up while inside."""
    server_proc = subprocess.Popen(
        [*prefix, sys.executable, "-c", _SERVER_SCRIPT, worker_addr, ps_addr],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        if server_proc.stdout.readline().strip() != "ready":
            raise CostModelError("the PS server process for the transfer calibration did not start")
        yield
    finally:
        server_proc.terminate()
        server_proc.wait(timeout=30)


def time_transfers(worker_addr, ps_addr, sizes, repeats, time_limit_s=240.0):
    """:func:`measure_transfers`'s timing, from a worker server at ``worker_addr`` against :func:`ps_server`."""
    import tensorflow as tf

    cluster = tf.train.ClusterSpec({"worker": [worker_addr], "ps": [ps_addr]})
    server = tf.distribute.Server(cluster, job_name="worker", task_index=0, protocol="grpc")
    return _time_sizes(tf, server.target, sizes, repeats, time.monotonic() + time_limit_s)


def _time_sizes(tf, target, sizes, repeats, deadline):
    graph = tf.Graph()
    fetches = []
    with graph.as_default():
        for nbytes in sizes:
            n = max(nbytes // 4, 1)
            pair = []
            for job in ("ps", "worker"):
                with tf.device(f"/job:{job}/task:0"):
                    var = tf.compat.v1.Variable(tf.zeros([n], tf.float32), name=f"v_{job}_{nbytes}")
                with tf.device("/job:worker/task:0"):
                    # Reading every element forces the whole tensor across.
                    pair.append(tf.reduce_max(tf.identity(var.read_value())))
            fetches.append((nbytes, pair))
        init = tf.compat.v1.global_variables_initializer()
    remote_times = {nbytes: [] for nbytes, _ in fetches}
    local_times = {nbytes: [] for nbytes, _ in fetches}
    with tf.compat.v1.Session(target, graph=graph) as sess:
        sess.run(init)
        for _, pair in fetches:
            sess.run(pair)  # warm-up
        # Rounds over all sizes, so that a change in the machine's load
        # during the measurement touches every size alike; each round in a
        # new order, so that no size always follows the largest transfer.
        rng = np.random.default_rng(0)
        for _ in range(repeats):
            for i in rng.permutation(len(fetches)):
                nbytes, (remote, local) = fetches[i]
                t0 = time.perf_counter()
                sess.run(remote)
                t1 = time.perf_counter()
                sess.run(local)
                remote_times[nbytes].append(t1 - t0)
                local_times[nbytes].append(time.perf_counter() - t1)
            if time.monotonic() > deadline:
                break
    out = []
    for nbytes, _ in fetches:
        # Difference of medians: the cost the transfer adds to a step.
        seconds = statistics.median(remote_times[nbytes]) - statistics.median(local_times[nbytes])
        out.append({"bytes": int(nbytes), "seconds": max(seconds, 1e-6), "repeats": len(remote_times[nbytes])})
    return out


_SESSION_SCRIPT = """
import json, sys
from cost_models.profiling.transfers import measure_transfers
print(json.dumps(measure_transfers([int(s) for s in sys.argv[2:]], int(sys.argv[1]))))
"""


def measure_sessions(sizes=SIZES, repeats=15, sessions=3):
    """Per-size medians of :func:`measure_transfers` run in ``sessions`` separate processes.

    Whole measurement sessions on this machine differ by up to ~50% at the
    same size (gRPC channel and process state), more than the repeats inside
    one session show; the median over sessions is what a later run expects.
    """
    runs = [run_json(_SESSION_SCRIPT, [repeats, *sizes], "a transfer measurement session") for _ in range(sessions)]
    return [
        {"bytes": points[0]["bytes"], "seconds": statistics.median(p["seconds"] for p in points),
         "repeats": sum(p["repeats"] for p in points), "sessions": len(points),
         "seconds_per_session": [p["seconds"] for p in points]}
        for points in zip(*runs)
    ]


def calibrate(sizes=SIZES, repeats=15, command="", sessions=3):
    """Measure (median over ``sessions`` processes) and fit; returns a :class:`TransferCalibration`."""
    points = measure_sessions(sizes, repeats, sessions)
    overhead, bandwidth = fit_line([p["bytes"] for p in points], [p["seconds"] for p in points])
    return TransferCalibration(overhead, bandwidth, points, command, machine_description())
