"""What TensorFlow's executor spends running one iteration of a loop, besides the body's kernels.

TensorFlow lowers a step's ``While`` op (LowerFunctionalOpsPass) to a
``Merge``, ``Switch``, ``Identity`` and ``NextIteration`` per loop variable
and iteration, and one ``LoopCond``; none runs a kernel, and the executor
runs them inline, far below the per-op cost of ops with kernels.  Measured
on a loop whose body changes one of V float32 variables (2000 trips; the
harness is cost_models.profiling.loop_iteration) and fitted as
``seconds per iteration = base + per_variable * V`` (``base`` holds the
multiply's kernel).  Every op of an iteration that runs no kernel (the
lowered control ops, and the body's constants, identities and tensor list
element moves: the prior's ``trivial`` class) is priced as one of those
lowered ops, ``per_variable / 4``: for the body's own, an assumption from
the same measurement.  The host drives a loop on a GPU too; there, and on
other CPUs than the one measured, the same figures are taken (assumed).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cost_models.calibration import VersionedRecord

# The control ops a loop variable is lowered to, per iteration (Merge, Switch, Identity, NextIteration).
LOWERED_PER_VARIABLE = 4


@dataclass(frozen=True)
class LoopIterationCalibration(VersionedRecord):
    """``base`` + ``per_variable`` x loop variables: seconds of one iteration's control, on ``device_model``."""

    FORMAT = "autodist.loop_iteration_calibration"
    VERSION = 1
    WHAT = "a loop iteration calibration"

    base: float
    per_variable: float
    device_model: str = "cpu-local"
    measurements: list = field(default_factory=list)
    command: str = ""
    machine: dict = field(default_factory=dict)

    @property
    def inline_op(self):
        """Seconds of one op of an iteration that runs no kernel."""
        return self.per_variable / LOWERED_PER_VARIABLE

    def iteration_seconds(self, inline_ops):
        """Control seconds of one iteration that runs ``inline_ops`` ops without a kernel (its lowered control
        ops among them)."""
        return self.base + self.inline_op * inline_ops
