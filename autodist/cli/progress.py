"""A one-line progress bar on stderr for the search (only when stderr is a terminal)."""

import sys


class SearchProgress:
    """``progress(fraction, best_step_time)`` callback drawing ``[####....] 40% best 12.3 ms``."""

    WIDTH = 30

    def __init__(self, label="searching", stream=None):
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty()
        self._last = -1

    def __call__(self, fraction, best_step_time):
        if not self.enabled:
            return
        filled = int(round(min(max(fraction, 0.0), 1.0) * self.WIDTH))
        if filled == self._last and fraction < 1.0:
            return
        self._last = filled
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.stream.write(f"\r{self.label} [{bar}] {fraction:4.0%}  best {best_step_time * 1e3:.2f} ms")
        if fraction >= 1.0:
            self.stream.write("\n")
        self.stream.flush()
