"""The link calendar: when each link resource is busy, and the first window a phase fits in."""

from __future__ import annotations

import bisect

# A phase on at least this many links (a collective over many devices) is
# reserved once for its whole link set rather than link by link.
WIDE_PHASE = 16


def _first_free(lists, start, seconds):
    """The earliest time at or after ``start`` when a window of ``seconds`` overlaps no interval of ``lists``."""
    moved = True
    while moved:
        moved = False
        for starts, ends in lists:
            i = bisect.bisect_right(ends, start)  # the first interval ending after start
            if i < len(starts) and starts[i] < start + seconds and ends[i] > start:
                start, moved = ends[i], True
    return start


def _insert(intervals, start, end):
    """Add ``[start, end]`` to sorted, disjoint ``intervals`` (starts, ends), merging what it touches."""
    starts, ends = intervals
    if not ends or start > ends[-1]:  # after every interval: the usual case
        starts.append(start)
        ends.append(end)
        return
    i = bisect.bisect_left(starts, start)
    if i > 0 and ends[i - 1] >= start:  # joins the interval before (or lies inside it)
        i -= 1
        start, end = starts[i], max(end, ends[i])
        del starts[i], ends[i]
    while i < len(starts) and starts[i] <= end:  # and the ones it reaches
        end = max(end, ends[i])
        del starts[i], ends[i]
    starts.insert(i, start)
    ends.insert(i, end)


class LinkQueue:
    """Occupation of link resources by phases, each at the earliest time all its links are free.

    Every link keeps its busy intervals; a phase takes the first window of
    its length, at or after it is ready, that is free on all of its links,
    so it may use a gap that an earlier reservation left (a transfer waiting
    for a busy receiver does not hold the sender's link idle meanwhile).
    Adjacent intervals are merged, which keeps a saturated link's list short.

    A *wide* phase (:data:`WIDE_PHASE` links or more: a collective over many
    devices) keeps one interval list for its whole link set, and every wide
    link set a list of what narrow phases reserved on its links, so neither
    kind walks a thousand links per reservation.  The windows found are the
    same as link by link: a window is free on a link set exactly when it
    overlaps no reservation of any phase sharing one of its links.  Wide
    link sets are known by the identity of their tuple (the cached phase
    lists hand out the same tuple each time), which spares hashing a
    thousand names per reservation.

    ``link_sets``: a cache, shared by the queues of one Simulator, of each
    wide link set: ``id -> (links, frozenset, ids of the wide sets it overlaps)``.
    """

    def __init__(self, link_sets=None):
        self.intervals = {}  # link -> ([starts], [ends]) of narrow phases, sorted, disjoint
        self.wide = {}  # id of a wide link tuple -> its own reservations
        self.beneath = {}  # id of a wide link tuple -> reservations of narrow phases on its links
        # shared: id -> (links, frozenset, overlapping ids), and link -> ids of the wide tuples holding it
        self.link_sets, self.wide_of_link = ({}, {}) if link_sets is None else link_sets
        self.narrow_busy = {}
        self.wide_busy = {}  # id of a wide link tuple -> seconds
        self.idle = {}  # id of a wide link tuple -> the tuple, used by phases of no occupancy only so far

    def link_busy(self):
        """Seconds each link is occupied."""
        busy = dict(self.narrow_busy)
        for links in self.idle.values():
            for link in links:
                busy.setdefault(link, 0.0)
        for key, seconds in self.wide_busy.items():
            for link in self.link_sets[key][0]:
                busy[link] = busy.get(link, 0.0) + seconds
        return busy

    def occupy(self, links, ready, seconds):
        """Reserve ``seconds`` on every link of ``links`` from the first window free on all; return (start, end).

        A phase of no occupancy (all its time is latency) holds no link and waits for none; its links
        count as used (0 s) in :meth:`link_busy`, a wide set's marked only when that is read.
        """
        if seconds <= 0:
            if len(links) >= WIDE_PHASE:
                self.idle[id(links)] = links
            else:
                for link in links:
                    self.narrow_busy.setdefault(link, 0.0)
            return ready, ready
        if len(links) >= WIDE_PHASE:
            return self._occupy_wide(links, ready, seconds)
        intervals, busy = self.intervals, self.narrow_busy
        lists = [intervals[link] for link in links if link in intervals]
        wide = ()
        if self.wide:
            wide = {w: None for link in links for w in self.wide_of_link.get(link, ()) if w in self.wide}
            lists += [self.wide[w] for w in wide]
        start = _first_free(lists, ready, seconds) if lists else ready
        end = start + seconds
        for link in links:
            spans = intervals.get(link)
            if spans is None:
                intervals[link] = ([start], [end])
            else:
                _insert(spans, start, end)
            busy[link] = busy.get(link, 0.0) + seconds
        for w in wide:
            _insert(self.beneath[w], start, end)
        return start, end

    def _occupy_wide(self, links, ready, seconds):
        key = id(links)
        if key not in self.wide:
            self._open_wide(links)
        lists = [self.wide[w] for w in self.link_sets[key][2] if w in self.wide] + [self.beneath[key]]
        start = _first_free(lists, ready, seconds)
        end = start + seconds
        _insert(self.wide[key], start, end)
        self.wide_busy[key] = self.wide_busy.get(key, 0.0) + seconds
        return start, end

    def _open_wide(self, links):
        """Start the lists of a wide link set: its own, and what narrow phases already hold of its links."""
        key = id(links)
        if key not in self.link_sets:
            members = frozenset(links)
            overlapping = {key}
            for other, (_, other_members, other_overlapping) in self.link_sets.items():
                if not members.isdisjoint(other_members):
                    overlapping.add(other)
                    other_overlapping.add(key)
            self.link_sets[key] = (links, members, overlapping)
            for link in links:
                self.wide_of_link.setdefault(link, []).append(key)
        members = self.link_sets[key][1]
        beneath = ([], [])
        for a, b in sorted((a, b) for link, spans in self.intervals.items() if link in members for a, b in zip(*spans)):
            _insert(beneath, a, b)
        self.beneath[key] = beneath
        self.wide[key] = ([], [])
