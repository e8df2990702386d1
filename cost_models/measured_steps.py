"""Steps measured whole, as training runs them: what the op model's step of a profiled graph is scaled to.

The op model predicts each op from features shared across models, and on
this machine it prices some profiled steps far from their own measured
time, most of all at a batch it was not profiled at (small_cnn on one core:
38 ms predicted, 44 ms measured at its profiled batch of 64; 12 ms
predicted, 25 ms measured at 32).  A
step the user profiled (``autodist profile ops --model``) has a better
answer: its measured time.  Profiling times every zoo step as training runs
it (Grappler's fusions on) on one core and on all of the machine's cores
(:func:`cost_models.profiling.run_step_seconds`); where the graph being
priced has the structure of such a step (the same op types and variable
shapes, at any batch: ``GraphItem.structure_hash``), its ops' times are
scaled so that their step takes the measured time at its batch (a line
through the measured batches: the profiled one and its half), on the cores
its process gets (interpolated between measured core counts).  The scaled ops
say so in their source (``"step-measured"``).  Everything else (how the
step's time spreads over its ops, transfers, contention) stays the model's
prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MeasuredStep:
    """One profiled step's measured time on ``device_model``: ``seconds_by_cores[cores][batch]``."""

    name: str
    structure: str
    device_model: str
    seconds_by_cores: dict  # core count (int) -> {batch (int) -> median step seconds}

    def seconds(self, cores, batch):
        """The step's time on ``cores`` cores at ``batch`` samples.

        Per measured core count: the measured time at a measured batch;
        elsewhere a line through the measured batches (a fixed part plus a
        part per sample; proportional to the batch with one measured batch,
        and never below that where the line would fall under it; the
        nearest measured batch's time where timing noise made the line fall
        with the batch), then linear between measured core counts (the
        nearest count beyond them).
        """
        counts = sorted(self.seconds_by_cores)
        return float(np.interp(cores, counts, [_at_batch(self.seconds_by_cores[c], batch) for c in counts]))

    def to_dict(self):
        return {"name": self.name, "structure": self.structure, "device_model": self.device_model,
                "seconds_by_cores": {str(c): {str(b): s for b, s in sorted(by_batch.items())}
                                     for c, by_batch in sorted(self.seconds_by_cores.items())}}

    @classmethod
    def from_dict(cls, data):
        return cls(data["name"], data["structure"], data["device_model"], _numbered(data["seconds_by_cores"]))


def _at_batch(by_batch, batch):
    """Seconds at ``batch`` from ``{batch: seconds}`` (see :meth:`MeasuredStep.seconds`)."""
    if batch in by_batch:
        return by_batch[batch]
    batches = sorted(by_batch)
    smallest = batches[0]
    proportional = by_batch[smallest] * batch / smallest
    if len(batches) == 1:
        return proportional
    slope, intercept = np.polyfit(batches, [by_batch[b] for b in batches], 1)
    if slope <= 0:
        return by_batch[min(batches, key=lambda b: abs(b - batch))]
    return float(max(slope * batch + intercept, min(proportional, by_batch[smallest])))


def _numbered(seconds_by_cores):
    """``{cores: {batch: seconds}}`` with the JSON keys as ints."""
    return {int(c): {int(b): float(s) for b, s in by_batch.items()} for c, by_batch in seconds_by_cores.items()}


def measured_steps_of(steps):
    """The :class:`MeasuredStep` of every profiled step record (name -> record) timed as it runs."""
    return [MeasuredStep(name, record["structure"], record["device_model"], _numbered(record["run_step_seconds"]))
            for name, record in sorted((steps or {}).items())
            if "run_step_seconds" in record and "structure" in record]
