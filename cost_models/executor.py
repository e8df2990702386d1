"""How TensorFlow's CPU executor overlaps the ops of a step.

The op model predicts each op's time alone: profiling runs ops one at a time,
each using every core for its kernel.  TensorFlow's default CPU executor
instead runs every op whose inputs are ready on a pool of inter-op threads
(as many as cores), so independent ops run side by side and share the cores.
A small op is single-threaded and gains fully from a neighbour; a large one
already keeps every core busy and gains nothing.  Measured on this machine
(``autodist costmodel eval`` prints both step times), the default executor
cut the zoo steps' time by 4-21% against one op at a time: least for
chains of large ops (wide_deep's table copies, ResNet's and VGG's
convolutions), most for the many small ops of the MLP, the transformer and
Inception's four-branch modules.

The model is a fluid schedule of the op graph: at most ``lanes`` ops run at
once, an op of standalone time ``t`` wants ``width(t) = 1 + (cores - 1) *
t / (t + width_seconds)`` cores, and when the running ops want more cores
than there are, all of them slow down by the same factor.  Each op is
charged its share of every interval it runs in (in proportion to the cores
it uses), so the shares add up to the schedule's length.  ``width_seconds``
is fitted on default-executor step times (:func:`fit_width_seconds`).

GPU ops run on one compute stream, one after another: no executor model.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass
from itertools import chain

import numpy as np

# The range searched for width_seconds: 1 us to 100 ms (log10 seconds).
_LOG_WIDTH_BOUNDS = (-6.0, -1.0)


def op_predecessors(ops):
    """Per op of ``ops`` (``OpInfo`` list, graph order), the indices of the ops it waits for (data or control)."""
    index = {op.name: i for i, op in enumerate(ops)}
    out = []
    for op in ops:
        names = {t.lstrip("^").split(":")[0] for t in op.inputs}
        out.append(sorted(index[n] for n in names if n in index))
    return out


@dataclass(frozen=True)
class ExecutorModel:
    """TensorFlow's CPU executor on one device model (see the module docstring)."""

    lanes: int
    cores: float
    width_seconds: float

    def widths(self, seconds):
        """Cores each op uses when it runs alone, from its standalone seconds."""
        seconds = np.asarray(seconds, dtype=np.float64)
        return 1.0 + (self.cores - 1.0) * seconds / (seconds + self.width_seconds)

    def schedule(self, seconds, predecessors):
        """Step time and per-op share of it when the ops of one step run under this executor.

        Parameters
        ----------
        seconds : array of float
            Each op's standalone time.
        predecessors : list of list of int
            The ops each op waits for (indices into ``seconds``).

        Returns
        -------
        (float, numpy array)
            The step time and each op's share (the shares add up to it).
        """
        seconds = np.asarray(seconds, dtype=np.float64)
        n = len(seconds)
        width = self.widths(seconds).tolist()
        seconds = seconds.tolist()  # Python floats: the loop below runs once per op
        waiting = [len(p) for p in predecessors]
        # Successors as one flat list with offsets per op (few objects: no
        # garbage-collector passes over a big graph's heap).
        sources = np.fromiter(chain.from_iterable(predecessors), dtype=np.int64, count=sum(waiting))
        order = np.argsort(sources, kind="stable")
        successors = np.repeat(np.arange(n), waiting)[order].tolist()
        offsets = np.searchsorted(sources[order], np.arange(n + 1)).tolist()
        ready = deque(i for i in range(n) if waiting[i] == 0)
        share = [0.0] * n
        running = {}  # op -> standalone seconds left
        now = 0.0
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
                if seconds[i] > 0:
                    running[i] = seconds[i]
                else:
                    done += 1
                    finish(i)
            if not running:
                if not ready:
                    break  # a cycle: the ops left never become ready
                continue
            demand = sum(width[i] for i in running)
            rate = min(1.0, self.cores / demand)
            dt = min(running.values()) / rate
            now += dt
            ended = []
            for i in running:
                share[i] += dt * width[i] / demand
                running[i] -= dt * rate
                if running[i] <= 1e-9 * seconds[i]:
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
        return cls(int(data["lanes"]), float(data["cores"]), float(data["width_seconds"]))


def fit_width_seconds(steps, lanes, cores):
    """The ``width_seconds`` whose schedules best match measured default-executor steps.

    ``steps`` is a list of ``(op seconds, predecessors, measured seconds)``;
    the fit minimises the mean squared relative error, searching log10 of
    ``width_seconds`` between 1 us and 100 ms.  ``None`` when there are no steps.
    """
    from scipy.optimize import minimize_scalar

    if not steps:
        return None

    def error(log_width):
        model = ExecutorModel(lanes, cores, 10.0**log_width)
        return float(np.mean([(model.schedule(s, p)[0] / measured - 1.0) ** 2 for s, p, measured in steps]))

    found = minimize_scalar(error, bounds=_LOG_WIDTH_BOUNDS, method="bounded", options={"xatol": 0.01})
    return float(10.0**found.x)
