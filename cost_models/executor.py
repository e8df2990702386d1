"""How TensorFlow's CPU executor overlaps the ops of a step.

The op model predicts each op's time alone: profiling runs ops one at a time,
each using every core for its kernel.  TensorFlow's default CPU executor
instead runs every op whose inputs are ready on a pool of inter-op threads
(as many as cores), so independent ops run side by side and share the
machine.  How much that gains depends on the ops, so profiling measures
each kernel twice (cost_models.profiling): with every core, and with one
intra-op thread.  Their ratio is the op's *width*, the cores it turns into
speed: in the shipped data a matrix product of at least 1 GFLOP runs a
median 1.83x faster on this machine's two cores than on one, an elementwise
add, multiply or copy moving at least 10 MB 1.20x, an op under 20 us not at
all.  Measured here (``autodist costmodel eval`` prints both step times),
the default executor cut the zoo steps' time by 5-18% against one op at a
time (resnet50 least, inception_v3 and the MLP most).

The model is a fluid schedule of the op graph:

- at most ``lanes`` ops run at once;
- an op wants ``width`` cores (its measured or predicted speed-up, between
  1 and ``cores``); when the running ops want more cores than there are,
  all of them slow down by the same factor;
- ops side by side share the memory bandwidth: an op alone streams its
  bytes in its own time, and when the running ops together would stream
  more than ``memory_bandwidth`` (or than the most demanding one alone),
  all of them slow down by the same factor;
- ``serial_overhead`` of every op's time is the executor's own work, which
  overlaps nothing: it is fitted on default-executor step times, taken
  after the executor settles where profiling could wait for it
  (:func:`fit_serial_overhead`, :func:`settling_runs`).

Each op is charged its share of every interval it runs in (in proportion
to the cores it uses) plus its serial overhead, so the shares add up to the
schedule's length.

GPU ops run on one compute stream, one after another: no executor model.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from itertools import chain

import numpy as np

from autodist.throughput import EXECUTOR_SETTLE_RUNS


# Bytes per second no memory reaches: the cap on an op's streaming demand.
_MAX_STREAMING = 1e18


# A step is timed settled only where its settling runs take at most this long;
# a larger model's steps are timed from its first runs.
SETTLE_SECONDS = 20.0


def settling_runs(step_seconds):
    """Runs before the executor's cost estimates settle, or 0 where they take over :data:`SETTLE_SECONDS`."""
    return EXECUTOR_SETTLE_RUNS if EXECUTOR_SETTLE_RUNS * step_seconds <= SETTLE_SECONDS else 0


def op_predecessors(ops):
    """Per op of ``ops`` (``OpInfo`` list, graph order), the indices of the ops it waits for (data or control)."""
    index = {op.name: i for i, op in enumerate(ops)}
    out = []
    for op in ops:
        names = {t.lstrip("^").split(":")[0] for t in op.inputs}
        out.append(sorted(index[n] for n in names if n in index))
    return out


def measured_widths(seconds, seconds_one_thread, cores):
    """Per op, the cores its kernel turns into speed: one-thread over all-core time, between 1 and ``cores``.

    1 where either time is missing (ops that ran no kernel).
    """
    seconds = np.asarray(seconds, dtype=np.float64)
    one = np.asarray(seconds_one_thread, dtype=np.float64)
    ok = np.isfinite(seconds) & np.isfinite(one) & (seconds > 0)
    ratio = np.divide(one, seconds, out=np.ones_like(seconds), where=ok)
    return np.clip(np.where(ok, ratio, 1.0), 1.0, cores)


@dataclass(frozen=True)
class ExecutorModel:
    """TensorFlow's CPU executor on one device model (see the module docstring)."""

    lanes: int
    cores: float
    memory_bandwidth: float
    serial_overhead: float

    def schedule(self, seconds, widths, bytes_moved, predecessors):
        """Step time and per-op share of it when the ops of one step run under this executor.

        Parameters
        ----------
        seconds : array of float
            Each op's standalone time (0: the op does not run).
        widths : array of float
            Each op's width (see the module docstring).
        bytes_moved : array of float
            Each op's input plus output bytes.
        predecessors : list of list of int
            The ops each op waits for (indices into ``seconds``).

        Returns
        -------
        (float, numpy array)
            The step time and each op's share (the shares add up to it).
        """
        seconds = np.asarray(seconds, dtype=np.float64)
        n = len(seconds)
        serial = np.minimum(seconds, self.serial_overhead)
        parallel = seconds - serial
        # Bytes per second each op streams alone; capped, so that an op of next
        # to no time has a finite demand (it finishes at once anyway).
        with np.errstate(over="ignore"):
            streaming = np.divide(np.nan_to_num(np.asarray(bytes_moved, dtype=np.float64)), parallel, out=np.zeros(n),
                                  where=parallel > 0)
        streaming = np.minimum(streaming, _MAX_STREAMING).tolist()
        width = np.asarray(widths, dtype=np.float64).tolist()
        left = parallel.tolist()  # Python floats: the loop below runs once per op
        waiting = [len(p) for p in predecessors]
        # Successors as one flat list with offsets per op (few objects: no
        # garbage-collector passes over a big graph's heap).
        sources = np.fromiter(chain.from_iterable(predecessors), dtype=np.int64, count=sum(waiting))
        order = np.argsort(sources, kind="stable")
        successors = np.repeat(np.arange(n), waiting)[order].tolist()
        offsets = np.searchsorted(sources[order], np.arange(n + 1)).tolist()
        ready = deque(i for i in range(n) if waiting[i] == 0)
        share = serial.tolist()
        running = {}  # op -> standalone seconds left
        now = float(serial.sum())
        done = 0

        def finish(i):
            for k in range(offsets[i], offsets[i + 1]):
                s = successors[k]
                waiting[s] -= 1
                if waiting[s] == 0:
                    ready.append(s)

        while done < n:
            while ready and len(running) < self.lanes:
                i = ready.popleft()
                if left[i] > 0:
                    running[i] = left[i]
                else:
                    done += 1
                    finish(i)
            if not running:
                if not ready:
                    break  # a cycle: the ops left never become ready
                continue
            demand = sum(width[i] for i in running)
            rate = min(1.0, self.cores / demand)
            streamed = sum(streaming[i] for i in running)
            if streamed > 0:
                rate = min(rate, max(self.memory_bandwidth, max(streaming[i] for i in running)) / streamed)
            dt = min(running.values()) / rate
            now += dt
            ended = []
            for i in running:
                share[i] += dt * width[i] / demand
                running[i] -= dt * rate
                if running[i] <= 1e-9 * left[i]:
                    ended.append(i)
            for i in ended:
                del running[i]
                done += 1
                finish(i)
        return now, np.array(share)

    def to_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, data):
        return cls(int(data["lanes"]), float(data["cores"]), float(data["memory_bandwidth"]),
                   float(data["serial_overhead"]))


def fit_serial_overhead(steps, lanes, cores, memory_bandwidth, overhead):
    """The part of the per-op ``overhead`` that overlaps nothing, fitted on measured default-executor steps.

    ``steps`` is a list of ``(op seconds, widths, bytes moved, predecessors,
    measured seconds)``; the fit minimises the mean squared relative error
    over serial overheads between 0 and ``overhead``.  ``None`` when there
    are no steps.
    """
    from scipy.optimize import minimize_scalar

    if not steps:
        return None

    def error(fraction):
        model = ExecutorModel(lanes, cores, memory_bandwidth, fraction * overhead)
        return float(np.mean([(model.schedule(s, w, b, p)[0] / measured - 1.0) ** 2 for s, w, b, p, measured in steps]))

    found = minimize_scalar(error, bounds=(0.0, 1.0), method="bounded", options={"xatol": 0.01})
    return float(found.x) * overhead
