"""The harness that measures the fixed cost of driving one training step (cost_models.remote_step's record).

Every measurement runs in fresh processes: a chief connected to K
``tf.distribute.Server`` tasks, two tasks reading each other's tensors, and
the trivial job of cost_models.profiling.loop_probe under each loop.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

from autodist.errors import CostModelError
from cost_models.calibration import fit_line
from cost_models.profiling.fresh_process import run_json
from cost_models.profiling.transfers import free_port, machine_description
from cost_models.remote_step import RemoteStepCalibration

TASKS = (1, 2, 3)
TENSOR_SIZES = (4096, 262144, 1048576, 4194304)
TENSORS_PER_STEP = 16


_TASK_SCRIPT = """
import sys, tensorflow as tf
workers = sys.argv[2].split(",")
cluster = tf.train.ClusterSpec({"chief": [sys.argv[1]], "worker": workers})
server = tf.distribute.Server(cluster, job_name="worker", task_index=int(sys.argv[3]), protocol="grpc")
print("ready", flush=True)
server.join()
"""


def _cpu_seconds(pid):
    """CPU seconds the threads of a process have run so far, to the nanosecond (Linux ``schedstat``; the
    ticks of ``/proc/PID/stat`` are too coarse for steps of milliseconds)."""
    total = 0
    for thread in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{thread}/schedstat") as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:  # the thread ended meanwhile
            pass
    return total / 1e9


@contextlib.contextmanager
def _connected_tasks(tasks, cores=None):
    """``tasks`` worker server processes (task ``i`` pinned to ``cores[i]`` where given), this process their
    client as the runtime connects; yields their processes."""
    import tensorflow as tf

    chief = f"localhost:{free_port()}"
    workers = [f"localhost:{free_port()}" for _ in range(tasks)]
    pin = (lambda i: ["taskset", "-c", str(cores[i])]) if cores else (lambda i: [])
    procs = [subprocess.Popen([*pin(i), sys.executable, "-c", _TASK_SCRIPT, chief, ",".join(workers), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for i in range(tasks)]
    try:
        for proc in procs:
            if proc.stdout.readline().strip() != "ready":
                raise CostModelError("a worker server for the remote step measurement did not start")
        tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec({"chief": [chief], "worker": workers}),
                                                  job_name="chief", task_index=0)
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


def _timed_calls(call, repeats, pids):
    """Median seconds of ``call()`` over ``repeats`` calls, and the CPU seconds per call of each of ``pids``."""
    before = [_cpu_seconds(pid) for pid in pids]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), [(_cpu_seconds(pid) - b) / repeats for pid, b in zip(pids, before)]


def measure_remote_steps(tasks, repeats=40):
    """One call of a function with a trivial part on each of ``tasks`` remote worker tasks: its median seconds,
    and the CPU seconds per call of the client and (mean) of each task.

    The client feeds a small input from its own memory and reads back one
    scalar, as the runtime's step does with its batch and loss.
    """
    import tensorflow as tf

    with _connected_tasks(tasks) as procs:
        @tf.function
        def step(x):
            parts = []
            for i in range(tasks):
                with tf.device(f"/job:worker/task:{i}"):
                    parts.append(tf.reduce_sum(x[i] * 2.0))
            return tf.add_n(parts)

        x = tf.ones([tasks, 16])
        for _ in range(5):  # trace, open the channels
            step(x).numpy()
        seconds, cpu = _timed_calls(lambda: step(x).numpy(), repeats, [os.getpid()] + [p.pid for p in procs])
    return {"seconds": seconds, "client_cpu": cpu[0], "task_cpu": statistics.mean(cpu[1:])}


def measure_tensor_cpu(sizes=TENSOR_SIZES, tensors=TENSORS_PER_STEP, cpu_seconds=0.5):
    """Per size, the CPU seconds one endpoint's process spends on one tensor moved between two tasks in a step.

    Task 0 holds ``tensors`` variables of the size; a step reads every one
    on task 1 (a transfer each), and the same step with task 1's own copies
    is the baseline.  Each task has a core of its own.  Each size runs for
    about ``cpu_seconds`` of transfers (a running thread's schedstat lags by
    up to a scheduler tick).
    """
    import tensorflow as tf

    with _connected_tasks(2, cores=(0, 1 % len(os.sched_getaffinity(0)))) as procs:
        pids = [p.pid for p in procs]
        out = []
        for nbytes in sizes:
            held = {}
            for task in (0, 1):
                with tf.device(f"/job:worker/task:{task}"):
                    held[task] = [tf.Variable(tf.zeros([nbytes // 4])) for _ in range(tensors)]

            def reads(variables):
                @tf.function
                def step():
                    with tf.device("/job:worker/task:1"):
                        return tf.add_n([tf.reduce_max(tf.identity(v)) for v in variables])
                return step

            cpu = {}
            repeats = max(20, math.ceil(cpu_seconds / (tensors * (1e-4 + nbytes / 1e9))))
            for task in (0, 1):
                step = reads(held[task])
                for _ in range(5):
                    step().numpy()
                cpu[task] = sum(_timed_calls(lambda: step().numpy(), repeats, pids)[1])
            out.append({"bytes": nbytes, "endpoint_cpu": max(cpu[0] - cpu[1], 0.0) / (2 * tensors),
                        "tensors": tensors, "repeats": repeats})
        return out


def measure_local_steps(repeats=200, warmup=120):
    """Median seconds of one step of the trivial job (cost_models.profiling.loop_probe) driven by ``model.fit`` and by a
    loop calling a ``tf.function`` step, each after ``warmup`` steps (TensorFlow's executor settles within about
    100 runs).

    A fit step is timed from one batch's end to the next (callbacks see the
    same), a function step around the call and the read of its loss.
    """
    from cost_models.profiling.loop_probe import fit_step_ends, function_step_seconds

    steps = warmup + repeats
    return {"fit_step": statistics.median(np.diff(fit_step_ends(steps)[warmup:])),
            "function_step": statistics.median(function_step_seconds(steps)[warmup:])}


_LOCAL_SCRIPT = """
import json, sys
from cost_models.profiling.remote_step import measure_local_steps
print(json.dumps(measure_local_steps(int(sys.argv[1]))))
"""

_SESSION_SCRIPT = """
import json, sys
from cost_models.profiling.remote_step import measure_remote_steps
print(json.dumps(measure_remote_steps(int(sys.argv[1]), int(sys.argv[2]))))
"""

_TENSOR_SCRIPT = """
import json
from cost_models.profiling.remote_step import measure_tensor_cpu
print(json.dumps(measure_tensor_cpu()))
"""


def calibrate_remote_steps(price_local_ops, tasks=TASKS, repeats=40, sessions=3, command=""):
    """Measure every task count in ``sessions`` fresh processes (medians over sessions) and fit its lines (wall
    seconds, the client's CPU), the tensor ends' CPU (medians over ``sessions`` processes) and the local loops,
    less the trivial job's ops as ``price_local_ops()`` prices them (``{"fit_step": seconds, "function_step":
    seconds}``, the ops of cost_models.profiling.loop_probe's step under each loop; the caller prices them, with the
    simulator, so that nothing here depends on it).

    The machine's load average before and after goes into the machine record: on a busy machine every step
    waits for cores, and the fit says so.
    """
    load_before = os.getloadavg()[0]
    points = []
    for k in tasks:
        runs = [run_json(_SESSION_SCRIPT, [k, repeats], "a remote step measurement session") for _ in range(sessions)]
        points.append({"tasks": k, **{key: statistics.median(run[key] for run in runs)
                                      for key in ("seconds", "client_cpu", "task_cpu")},
                       "repeats": repeats * sessions, "seconds_per_session": [run["seconds"] for run in runs]})
    base, per_task = _task_line(points, "seconds")
    client_cpu, client_cpu_per_task = _task_line(points, "client_cpu")
    tensor_runs = [run_json(_TENSOR_SCRIPT, [], "a tensor CPU measurement session") for _ in range(sessions)]
    tensors = [{**first, "endpoint_cpu": statistics.median(run[i]["endpoint_cpu"] for run in tensor_runs),
                "repeats": sum(run[i]["repeats"] for run in tensor_runs)} for i, first in enumerate(tensor_runs[0])]
    tensor_cpu, tensor_cpu_rate = fit_line([t["bytes"] for t in tensors], [t["endpoint_cpu"] for t in tensors])
    local = [run_json(_LOCAL_SCRIPT, [max(repeats, 100)], "a local step measurement session") for _ in range(sessions)]
    local_measurements = {kind: [run[kind] for run in local] for kind in ("fit_step", "function_step")}
    local_measurements["repeats"] = max(repeats, 100)
    local_ops = price_local_ops()
    loops = {kind: statistics.median(local_measurements[kind]) - priced for kind, priced in local_ops.items()}
    if min(loops.values()) <= 0:
        raise CostModelError(f"the cost model prices the trivial job's ops ({local_ops}) at or above its measured "
                             f"steps: refit the op model on this machine first")
    machine = {**machine_description(), "load_average": {"before": round(load_before, 2),
                                                           "after": round(os.getloadavg()[0], 2)}}
    return RemoteStepCalibration(base, per_task, loops["fit_step"], loops["function_step"],
                                 client_cpu, client_cpu_per_task, statistics.median(p["task_cpu"] for p in points),
                                 tensor_cpu, tensor_cpu_rate, points, local_measurements, local_ops, tensors, command,
                                 machine)


def _task_line(points, key):
    """``(base, per_task)`` of ``points[key]`` against their task counts (a flat line where it falls)."""
    x = np.array([p["tasks"] for p in points], dtype=np.float64)
    t = np.array([p[key] for p in points])
    per_task, base = np.polyfit(x, t, 1)
    if per_task < 0:
        return float(np.median(t)), 0.0
    return max(float(base), 0.0), float(per_task)
