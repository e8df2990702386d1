"""TensorFlow transfer calibration: per-tensor overhead and achieved bandwidth, as a versioned record.

A :class:`TransferCalibration` holds ``seconds = overhead + bytes / bandwidth``
fitted (:func:`fit_line`) on real TensorFlow transfers between two processes
on this machine over loopback gRPC, with measurements, command and machine
(``cost_models/data/transfer_calibration.json``); cost_models.profiling.transfers
measures them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from autodist.errors import CostModelError
from autodist.io import read_json, write_json_atomic

FORMAT = "autodist.transfer_calibration"
VERSION = 1


class VersionedRecord:
    """A measurement dataclass saved as JSON with its ``FORMAT`` name and ``VERSION`` (``WHAT`` names it in errors)."""

    FORMAT = VERSION = WHAT = None

    def to_dict(self):
        return dict(format=self.FORMAT, version=self.VERSION, **asdict(self))

    def save(self, path):
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path):
        """The record saved at ``path``; CostModelError if it is not this format and version or lacks a field."""
        data = read_json(path)
        if data.get("format") != cls.FORMAT or data.get("version") != cls.VERSION:
            raise CostModelError(f"not {cls.WHAT} (expected {cls.FORMAT} v{cls.VERSION})", source=path)
        try:
            return cls(**{k: v for k, v in data.items() if k not in ("format", "version")})
        except TypeError as exc:
            raise CostModelError(str(exc), source=path) from None


@dataclass
class TransferCalibration(VersionedRecord):
    """A fitted ``overhead + bytes / bandwidth`` line and the points behind it.

    ``measurements`` is a list of ``{"bytes", "seconds", "repeats"}`` with
    the median seconds of each size.  A collective calibration
    (cost_models.profiling.collectives) also holds ``shared_core``: the same
    sizes timed with both processes pinned to one core (see :meth:`shared_core_factor`).
    """

    FORMAT, VERSION, WHAT = FORMAT, VERSION, "a transfer calibration"

    overhead: float
    bandwidth: float
    measurements: list = field(default_factory=list)
    command: str = ""
    machine: dict = field(default_factory=dict)
    shared_core: list = field(default_factory=list)

    def shared_core_factor(self, nbytes):
        """How many times longer ``nbytes`` take with both processes pinned to one core than as measured: the
        medians' ratio, log-log between the sizes measured both ways, the nearest size's beyond them; None
        where ``shared_core`` was not measured."""
        alone = {m["bytes"]: m["seconds"] for m in self.measurements}
        pairs = sorted((m["bytes"], m["seconds"] / alone[m["bytes"]]) for m in self.shared_core if m["bytes"] in alone)
        if not pairs:
            return None
        return float(np.exp(np.interp(np.log(max(nbytes, 1.0)), np.log([b for b, _ in pairs]),
                                      np.log([r for _, r in pairs]))))

    def line(self, nbytes):
        """The fitted line ``overhead + bytes / bandwidth``."""
        return self.overhead + np.asarray(nbytes, dtype=np.float64) / self.bandwidth

    def predict(self, nbytes):
        """Predicted seconds of one transfer of ``nbytes``.

        Inside the measured range: log-log interpolation between the measured
        medians (the measured curve is not a straight line: gRPC framing and
        copies change cost around 1-4 MiB); outside it: the fitted line.
        """
        x = np.asarray(nbytes, dtype=np.float64)
        if len(self.measurements) < 2:
            return self.line(x)
        points = sorted((m["bytes"], m["seconds"]) for m in self.measurements)
        xs = np.log([p[0] for p in points])
        ts = np.log([p[1] for p in points])
        inside = (x >= points[0][0]) & (x <= points[-1][0])
        interp = np.exp(np.interp(np.log(np.maximum(x, 1.0)), xs, ts))
        out = np.where(inside, interp, self.line(x))
        return float(out) if out.ndim == 0 else out



def fit_line(nbytes, seconds):
    """Fit ``seconds = overhead + bytes / bandwidth`` minimising the error relative to the line.

    Relative to the line, not to the measured time: a size whose cost the
    machine's noise hid (a difference of medians near 0, floored at 1 us)
    then misses by at most its own 100%.  Divided by its measured time, it
    outweighed every other size a thousandfold and could tip the slope
    negative.

    Returns
    -------
    overhead : float (seconds, >= 0)
    bandwidth : float (bytes/s)
    """
    from scipy.optimize import least_squares

    x = np.asarray(nbytes, dtype=np.float64)
    t = np.asarray(seconds, dtype=np.float64)
    if len(x) < 2 or np.any(t <= 0):
        raise CostModelError("need at least two sizes with positive times to fit a transfer line")
    small, large = np.argmin(x), np.argmax(x)
    if x[large] == x[small] or t[large] <= t[small]:
        raise CostModelError("transfer times do not grow with size; cannot fit a bandwidth")
    slope = (t[large] - t[small]) / (x[large] - x[small])
    start = np.array([np.median(t[x < x[large]]), slope])
    fit = least_squares(lambda p: 1.0 - t / (p[0] + p[1] * x), start, bounds=([0.0, slope * 1e-6], np.inf),
                        x_scale=start, xtol=1e-15, ftol=1e-15, gtol=1e-15)
    overhead, inv_bw = fit.x
    return float(overhead), float(1.0 / inv_bw)
