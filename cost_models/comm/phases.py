"""Helpers every part of the communication model shares: a ring's hops, checked byte counts, link busy time."""

from __future__ import annotations

from autodist.errors import InputError
from cost_models.types import Phase


def link_busy(phase_lists):
    """Seconds each link is busy when all ``phase_lists`` run (contention bound).

    With queues on links, no schedule finishes before the busiest link
    has carried all its phases; ``max(link_busy(...).values())`` bounds, for
    example, a PS fan-in round from below.
    """
    busy = {}
    for phases in phase_lists:
        for phase in phases:
            for link in phase.links:
                busy[link] = busy.get(link, 0.0) + phase.seconds
    return busy


def slowest(phases):
    """One phase as long as the longest of ``phases``, on all their links (None if there are none)."""
    if not phases:
        return None
    links = sorted({link for p in phases for link in p.links})
    return Phase(max(p.seconds for p in phases), tuple(links))


def check_bytes(nbytes):
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) or nbytes < 0:
        raise InputError(f"nbytes must be a non-negative number, got {nbytes!r}")
    return nbytes


def hops(devices):
    """The ``(device, next device)`` hops of a ring over ``devices``."""
    return zip(devices, devices[1:] + devices[:1])
