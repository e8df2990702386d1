"""The event engine: transfers and collectives queued by request time, run on the link calendar.

It knows nothing of gradients, parameter servers or updates: a task is a
list of ``(latency, occupancy, links)`` phases, a request time, a label and
a callback that hears when it ended (which may submit more).
"""

from __future__ import annotations

import heapq

from placement.simulator.links import LinkQueue


class EventEngine:
    """A heap of pending tasks over one :class:`~placement.simulator.links.LinkQueue`.

    ``events``: the ``(label, "sync", links, start, end)`` of every phase when
    ``trace``; ``collective_spans``: ``(start, end, contention)`` of the
    collectives that take a share of the compute beside them.
    """

    def __init__(self, link_sets, trace):
        self.links = LinkQueue(link_sets)
        self.trace = trace
        self.events = []
        self.heap = []
        self.seq = 0
        self.stream_free = {}  # devices of a collective group -> when its stream is next free
        self.collective_spans = []

    def submit(self, t, phases, label, on_done, stream=None, contention=None):
        """Queue ``phases`` from ``t``; a collective names its ``stream`` (its devices) and runs atomically,
        taking ``contention`` (a fraction, or None) of its time from the compute it runs beside."""
        if not phases:
            on_done(t)
            return
        heapq.heappush(self.heap, (t, self.seq, 0, phases, label, on_done, stream, contention))
        self.seq += 1

    def drain(self):
        """Run every queued task; a collective runs its phases back to back, on its group's one
        stream in the order the collectives are issued (each starts, latency included, once the one
        before it ended); separate transfers queue phase by phase.

        A transfer's next phase goes on at once, without the heap, when it is ready before anything
        queued: the heap would hand it out next anyway.
        """
        heap, occupy, trace, stream_free = self.heap, self.links.occupy, self.trace, self.stream_free
        while heap:
            t, _, index, phases, label, on_done, stream, contention = heapq.heappop(heap)
            if stream is not None:  # a collective: all its phases, once its stream is free
                end = begin = max(t, stream_free.get(stream, t))
                for latency, occupancy, used in phases:
                    start, end = occupy(used, end + latency, occupancy)
                    if trace:
                        self.events.append((label, "sync", "+".join(used) or "local", start, end))
                stream_free[stream] = end
                if contention:
                    self.collective_spans.append((begin, end, contention))
                on_done(end)
                continue
            end = t
            while True:
                latency, occupancy, used = phases[index]
                start, end = occupy(used, end + latency, occupancy)
                if trace:
                    self.events.append((label, "sync", "+".join(used) or "local", start, end))
                index += 1
                if index == len(phases):
                    on_done(end)
                    break
                if heap and heap[0][0] <= end:
                    heapq.heappush(heap, (end, self.seq, index, phases, label, on_done, stream, contention))
                    self.seq += 1
                    break
