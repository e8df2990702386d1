"""The fixed cost of driving one training step, measured on this machine.

Two kinds of loop drive a step, besides its ops and tensor transfers:

- **One client on remote tasks.** Plans with a parameter server (or a
  replica split over devices) run from one client: the chief calls one
  ``tf.function`` whose ops are placed on the worker and PS tasks
  (``launcher.runtime.trainer``).  Every call pays the client's dispatch of
  the function's part on each remote task and the wait for them all.  It is
  measured for 1..K remote tasks running a trivial op each (a chief process
  connected to K ``tf.distribute.Server`` processes, as the runtime
  connects) and fitted as ``seconds = base + per_task * tasks``.
- **Every replica its own loop.** Plans on collective ops run the user's
  script in every replica process: Keras' ``model.fit`` loop (its data
  iterator, callbacks and the call of its train function) or the script's
  own loop calling its ``tf.function`` step.  Each is measured on a trivial
  model (one Dense unit, whose ops take microseconds): ``fit_step`` and
  ``function_step``.

Measurements, fit, command and machine are stored as data
(``cost_models/data/remote_step_calibration.json``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from autodist.errors import CostModelError
from cost_models.calibration import VersionedRecord, _free_port, machine_description
from cost_models.fresh_process import run_json

FORMAT = "autodist.remote_step_calibration"
VERSION = 2
TASKS = (1, 2, 3)


@dataclass
class RemoteStepCalibration(VersionedRecord):
    """``seconds = base + per_task * tasks`` of one client-driven step, the fixed cost of a step each replica
    drives itself (``fit_step``, ``function_step``), and the medians behind them.

    ``measurements``: ``{"tasks", "seconds", "repeats", "seconds_per_session"}``;
    ``local_measurements``: ``{"fit_step": [seconds per session], "function_step": [...], "repeats"}``.
    """

    FORMAT, VERSION, WHAT = FORMAT, VERSION, "a remote step calibration"

    base: float
    per_task: float
    fit_step: float
    function_step: float
    measurements: list = field(default_factory=list)
    local_measurements: dict = field(default_factory=dict)
    command: str = ""
    machine: dict = field(default_factory=dict)

    def seconds(self, tasks):
        """The fixed cost of one step whose function has parts on ``tasks`` remote tasks."""
        return self.base + self.per_task * tasks

    def replica_loop_seconds(self, loop):
        """The fixed cost of one step that a replica's own ``loop`` drives: ``"fit"`` (Keras ``model.fit``),
        ``"function"`` (a script's loop calling its ``tf.function`` step), or ``""`` (a graph without a script:
        no loop to price)."""
        return {"fit": self.fit_step, "function": self.function_step, "": 0.0}[loop]



_TASK_SCRIPT = """
import sys, tensorflow as tf
workers = sys.argv[2].split(",")
cluster = tf.train.ClusterSpec({"chief": [sys.argv[1]], "worker": workers})
server = tf.distribute.Server(cluster, job_name="worker", task_index=int(sys.argv[3]), protocol="grpc")
print("ready", flush=True)
server.join()
"""


def measure_remote_steps(tasks, repeats=40):
    """Median seconds of one call of a function with a trivial part on each of ``tasks`` remote worker tasks.

    The client feeds a small input from its own memory and reads back one
    scalar, as the runtime's step does with its batch and loss.
    """
    import tensorflow as tf

    chief = f"localhost:{_free_port()}"
    workers = [f"localhost:{_free_port()}" for _ in range(tasks)]
    procs = [subprocess.Popen([sys.executable, "-c", _TASK_SCRIPT, chief, ",".join(workers), str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for i in range(tasks)]
    try:
        for proc in procs:
            if proc.stdout.readline().strip() != "ready":
                raise CostModelError("a worker server for the remote step measurement did not start")
        tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec({"chief": [chief], "worker": workers}),
                                                  job_name="chief", task_index=0)

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
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step(x).numpy()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


def measure_local_steps(repeats=200, warmup=120):
    """Median seconds of one step of a trivial model driven by ``model.fit`` and by a loop calling a
    ``tf.function`` step, each after ``warmup`` steps (TensorFlow's executor settles within about 100 runs).

    A fit step is timed from one batch's end to the next (callbacks see the
    same), a function step around the call and the read of its loss.
    """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    batch, steps = 8, warmup + repeats
    x, y = np.zeros((batch * steps, 4), np.float32), np.zeros((batch * steps, 1), np.float32)
    ends = []

    class BatchEnds(keras.callbacks.Callback):
        def on_train_batch_end(self, index, logs=None):
            ends.append(time.perf_counter())

    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[BatchEnds()])
    fit_step = statistics.median(np.diff(ends[warmup:]))

    optimizer = keras.optimizers.SGD(0.01)

    @tf.function
    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xb, training=True) - yb))
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    xb, yb = tf.constant(x[:batch]), tf.constant(y[:batch])
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        float(step(xb, yb))
        times.append(time.perf_counter() - t0)
    return {"fit_step": fit_step, "function_step": statistics.median(times[warmup:])}


_LOCAL_SCRIPT = """
import json, sys
from cost_models.remote_step import measure_local_steps
print(json.dumps(measure_local_steps(int(sys.argv[1]))))
"""


_SESSION_SCRIPT = """
import json, sys
from cost_models.remote_step import measure_remote_steps
print(json.dumps(measure_remote_steps(int(sys.argv[1]), int(sys.argv[2]))))
"""


def calibrate_remote_steps(tasks=TASKS, repeats=40, sessions=3, command=""):
    """Measure every task count in ``sessions`` fresh processes (medians over sessions) and fit the line.

    The machine's load average before and after goes into the machine record: on a busy machine every step
    waits for cores, and the fit says so.
    """
    load_before = os.getloadavg()[0]
    points = []
    for k in tasks:
        runs = [run_json(_SESSION_SCRIPT, [k, repeats], "a remote step measurement session") for _ in range(sessions)]
        points.append({"tasks": k, "seconds": statistics.median(runs), "repeats": repeats * sessions,
                       "seconds_per_session": runs})
    x = np.array([p["tasks"] for p in points], dtype=np.float64)
    t = np.array([p["seconds"] for p in points])
    per_task, base = np.polyfit(x, t, 1)
    if per_task < 0:
        per_task, base = 0.0, float(np.median(t))
    local = [run_json(_LOCAL_SCRIPT, [max(repeats, 100)], "a local step measurement session") for _ in range(sessions)]
    local_measurements = {kind: [run[kind] for run in local] for kind in ("fit_step", "function_step")}
    local_measurements["repeats"] = max(repeats, 100)
    machine = {**machine_description(), "load_average": {"before": round(load_before, 2),
                                                           "after": round(os.getloadavg()[0], 2)}}
    return RemoteStepCalibration(max(float(base), 0.0), float(per_task),
                                 statistics.median(local_measurements["fit_step"]),
                                 statistics.median(local_measurements["function_step"]),
                                 points, local_measurements, command, machine)
