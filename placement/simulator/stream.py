"""A plan on collective ops as one stream, run again only from the first collective a move changed.

On collective ops every replica is one device and every collective runs
over all of them, on one stream, in the order they are ready (ties in issue
order), each phase once the one before it ended: no phase ever waits for a
link (every earlier reservation of its links ended before the stream was
free), so the link calendar decides nothing and the stream is a recurrence.
A :class:`StreamLog` keeps, for the run before, the state before each
collective; the next run starts at the first collective that is not the same
priced plan (placement.simulator.collectives) in the same place, from the
state logged there: FlexFlow's delta simulation on the step's one queue.
The engine's run of the same stream (``Simulator(incremental=False)``) gives
the same numbers, to the bit (tests/test_incremental.py).
"""

from __future__ import annotations


class StreamLog:
    """What one run of a stream left: its replica classes, the plans applied before it (no phases), the
    plans in the order they ran, and the run's state before each of them (see :func:`run_stream`)."""

    def __init__(self, classes=None, instant=(), order=(), states=()):
        self.classes = classes
        self.instant = instant
        self.order = order
        self.states = states  # before each plan of ``order``, and after the last (see _state)
        self.finish, self.cpu_updates, self.spans = [], [], []  # the run's, in the order it added them

    def reusable(self, classes, instant, order):
        """How many of ``order``'s first plans ran, in this place, from the same state before."""
        if classes is not self.classes or len(instant) != len(self.instant) or not all(
                a is b for a, b in zip(instant, self.instant)):
            return 0
        n = 0
        for a, b in zip(order, self.order):
            if a is not b:
                break
            n += 1
        return n


def run_stream(run, plans, log):
    """Run collective ``plans`` (:meth:`SyncRun.collective_plan` tuples, in issue order) on one stream of
    ``run`` (a :class:`~placement.simulator.run.SyncRun`), from ``log`` of the run before where they agree;
    return the log of this run."""
    for p in plans:
        run.charge(p[7])
    instant = [p for p in plans if not p[1]]
    for ready, _, _, cast, updates, update_label, _, _ in instant:  # no transfer: updated at once, as submitted
        run._apply(ready + cast, updates, update_label)
    order = sorted((p for p in plans if p[1]), key=lambda p: p[0])  # by readiness, ties in issue order (the heap)
    start = log.reusable(run.classes, instant, order)
    spans = run.engine.collective_spans
    free = None
    if start:
        free, upd_free, upd_busy, finished, updated, spanned = log.states[start]
        run.upd_free, run.upd_busy = dict(upd_free), dict(upd_busy)
        run.finish += log.finish[len(run.finish):finished]
        run.cpu_updates += log.cpu_updates[len(run.cpu_updates):updated]
        spans += log.spans[:spanned]
    states = list(log.states[:start])
    for ready, phases, _, cast, updates, update_label, contention, _ in order[start:]:
        states.append(_state(run, free, spans))
        begin = end = ready if free is None or free < ready else free
        for latency, occupancy, _ in phases:
            end = end + latency
            if occupancy > 0:
                end = end + occupancy
        free = end
        if contention:
            spans.append((begin, end, contention))
        run._apply(end + cast, updates, update_label)
    states.append(_state(run, free, spans))
    done = StreamLog(run.classes, instant, order, states)
    done.finish, done.cpu_updates, done.spans = run.finish[:], run.cpu_updates[:], spans[:]
    return done


def _state(run, free, spans):
    """What the rest of a stream's run reads: when the stream is free, each replica device's updates, and how
    many ends, CPU updates and contended spans the run has so far."""
    return free, dict(run.upd_free), dict(run.upd_busy), len(run.finish), len(run.cpu_updates), len(spans)
