"""What TensorFlow's gRPC and collectives achieve over this machine's emulated links, measured.

An emulated node's NIC (autodist.resource_spec.emulated) is a veth pair
shaped by ``tc`` to the NIC's rate.  The rate is the wire's: Ethernet, IP and
TCP headers take their share of it, and at high rates this machine's cores,
not the shaper, bind: each node's processes run on its one core, which does
gRPC's copies and the ring's sums too.  This module measures, per preset,
between two namespaces of ``launcher.emulation`` (each task pinned to its
node's cores, as the runtime's are):

- ``transfer``: one tensor of about ``LINK_SECONDS`` (cost_models.profiling.emulated_link) of the rate, read from
  a PS task on the other node, as ``cost_models.calibration`` times loopback
  (remote read minus local).  Its bytes per second over the rate are the
  link's ``efficiency``, at which the communication model prices every
  transfer between emulated nodes.  Smaller transfers are not priced from
  their own times: each was timed after an idle gap, in which the shaper's
  token bucket filled, and sent its first bucket of bytes at once (a 256 KiB
  read over emu-100mbit took 19.2 ms, where the rate alone takes 21.0), which
  transfers one after another in a step do not get.
- ``allreduces``: one 2-task ``CollectiveReduceV2`` ring allreduce per size
  (``cost_models.collectives`` over loopback does the same), up to about
  ``LINK_SECONDS`` of the rate.  A line rate times an efficiency prices these
  badly at high rates (a 2 MiB collective over emu-10gbit took 9.9 ms where
  that priced 7.2; 16 MiB 56-75 ms against 42), so every collective between
  emulated nodes takes this measured curve
  (:meth:`EmulatedLinkCalibration.allreduce_seconds`).

``cost_models/data/emulated_link_calibration.json`` holds the measurements;
cost_models.profiling.emulated_link measures them (as root).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from sklearn.isotonic import isotonic_regression

from autodist.errors import CostModelError
from cost_models.calibration import TransferCalibration, VersionedRecord, fit_line

FORMAT = "autodist.emulated_link_calibration"
VERSION = 2

@dataclass
class EmulatedLinkCalibration(VersionedRecord):
    """What TensorFlow achieves over emulated links, per measured rate.

    ``points``: per preset ``{"preset", "rate_bytes", "efficiency", "transfer", "allreduces"}``: the achieved
    fraction of the rate, the transfer it comes from (``{"bytes", "seconds", "repeats"}``, a median) and the
    list of such medians of 2-task collective allreduces.
    """

    FORMAT, VERSION, WHAT = FORMAT, VERSION, "an emulated link calibration"

    points: list
    command: str = ""
    machine: dict = field(default_factory=dict)

    def efficiency(self, rate_bytes):
        """The achieved fraction of a link of ``rate_bytes`` bytes/s: interpolated in log rate, clamped."""
        points = sorted((p["rate_bytes"], p["efficiency"]) for p in self.points)
        if not points:
            raise CostModelError("an emulated link calibration without measurements")
        if rate_bytes <= points[0][0]:
            return points[0][1]
        for (r0, e0), (r1, e1) in zip(points, points[1:]):
            if rate_bytes <= r1:
                w = math.log(rate_bytes / r0) / math.log(r1 / r0)
                return e0 + w * (e1 - e0)
        return points[-1][1]

    @functools.cached_property
    def _allreduces(self):
        """``[(rate, TransferCalibration)]`` by rate (priced by :func:`_at`).

        The medians are first made to grow with size (an isotonic fit): more bytes never take less time, and
        the small sizes' medians are noise around a fixed cost (4 KiB over emu-1gbit in 1.51 ms, 16 KiB in
        1.12)."""
        measured = sorted((p["rate_bytes"], p["allreduces"]) for p in self.points if p.get("allreduces"))
        return [(rate, _growing_curve(points)) for rate, points in measured]

    def allreduce_seconds(self, rate_bytes, nbytes):
        """Seconds of one 2-task collective ring allreduce of ``nbytes`` over an emulated link of ``rate_bytes``.

        The measured curve at that rate: geometric between the measured rates around it; above the fastest,
        the fastest's (the cores bind there); below the slowest, the slowest's with the part that grows with
        size slowed by the ratio of the rates (the link binds there).
        """
        curves = self._allreduces
        if not curves:
            raise CostModelError("an emulated link calibration without collective allreduces: run 'autodist "
                                 "profile emulated-links' (as root)")
        (slowest, curve), fastest = curves[0], curves[-1]
        if rate_bytes >= fastest[0]:
            return _at(fastest[1], nbytes)
        if rate_bytes <= slowest:
            fixed = _at(curve, 0)
            return fixed + max(_at(curve, nbytes) - fixed, 0.0) * slowest / rate_bytes
        for (r0, c0), (r1, c1) in zip(curves, curves[1:]):
            if rate_bytes <= r1:
                w = math.log(rate_bytes / r0) / math.log(r1 / r0)
                return math.exp((1 - w) * math.log(_at(c0, nbytes)) + w * math.log(_at(c1, nbytes)))
        raise AssertionError("unreachable: the rate is below the fastest measured")


def _at(curve, nbytes):
    """``curve``'s seconds at ``nbytes``: log-log between its measured sizes; below the smallest, that size's (a
    fixed cost); above the largest, at the bytes per second between its two largest (the line fitted over all
    sizes leans to the small sizes' fixed costs: it priced 24 MiB over emu-100mbit under the measured 16 MiB)."""
    points = curve.measurements
    if nbytes > points[-1]["bytes"] and len(points) > 1:
        (b0, t0), (b1, t1) = ((m["bytes"], m["seconds"]) for m in points[-2:])
        return t1 + (nbytes - b1) * (t1 - t0) / (b1 - b0)
    return float(curve.predict(max(nbytes, points[0]["bytes"])))


def _growing_curve(points):
    """A TransferCalibration through ``points`` (``{"bytes", "seconds"}``) with seconds made non-decreasing."""
    points = sorted(points, key=lambda m: m["bytes"])
    sizes = [m["bytes"] for m in points]
    seconds = isotonic_regression([m["seconds"] for m in points], increasing=True)
    return TransferCalibration(*fit_line(sizes, seconds),
                               [{"bytes": b, "seconds": float(t)} for b, t in zip(sizes, seconds)])
