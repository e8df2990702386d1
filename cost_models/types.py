"""Plain records the cost models hand to the simulator."""

from __future__ import annotations

from dataclasses import dataclass

SOURCES = ("learned", "step-measured", "prior", "fallback", "calibrated", "assumed")


@dataclass(frozen=True)
class Phase:
    """One stage of a transfer or collective.

    Phases of one operation run one after another; each occupies all of its
    ``links`` (ResourceSpec link resource names) for its whole ``seconds``.
    """

    seconds: float
    links: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpCost:
    """Predicted time of one op on one device and where the number came from.

    ``seconds`` is the op's time alone on the device; ``step_seconds`` its
    share of the step when the step's ops run on the device together (less
    than ``seconds`` where the device's executor overlaps ops, see
    cost_models.executor; the shares of a step's ops add up to its compute
    time).  ``source`` is ``"learned"`` (the fitted model, for op types and
    device models it was trained on), ``"step-measured"`` (the fitted
    model's, scaled to the measured time of a step of the same structure,
    see cost_models.measured_steps), ``"prior"`` (the roofline with
    per-op-type efficiencies), ``"calibrated"`` / ``"assumed"`` (the GPU
    kernel model, with efficiencies fitted on published figures of the
    GPU's architecture or not, see cost_models.gpu) or ``"fallback"`` (an
    op type none of them knows).
    """

    seconds: float
    source: str
    step_seconds: float
