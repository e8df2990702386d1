"""What a search may spend (:class:`Budget`) and the temperature its acceptance schedule starts and ends at."""

from __future__ import annotations

import math
import time


class Budget:
    """What the search may spend: wall-clock seconds from ``started``, or an exact number of moves.

    ``reserve``: seconds kept for the work after the search (the final
    simulation with its timeline).
    """

    def __init__(self, started, seconds=None, moves=None):
        self.started = started
        self.seconds = seconds
        self.moves = moves
        self.made = 0
        self.reserve = 0.0

    def fraction(self):
        """How much is spent, from 0 to 1."""
        if self.moves is not None:
            return min(1.0, self.made / self.moves)
        return min(1.0, (time.perf_counter() - self.started) / max(self.seconds - self.reserve, 1e-9))

    def spent(self):
        return self.fraction() >= 1.0


def temperature_for(deltas, acceptance):
    """The temperature at which an uphill delta of ``deltas`` is accepted with mean probability ``acceptance``."""
    low, high = 1e-12, 1e3
    for _ in range(100):
        mid = math.sqrt(low * high)
        if sum(math.exp(-d / mid) for d in deltas) / len(deltas) < acceptance:
            low = mid
        else:
            high = mid
    return math.sqrt(low * high)
