"""Cost models: learned op costs and a calibrated communication model.

Public API::

    from cost_models import CostModel, CommModel, Phase, OpCost

``CostModel.default()`` loads the shipped fitted op model and transfer
calibration without TensorFlow; profiling (``cost_models.profiling``) and
calibration measurement import TensorFlow lazily.
"""

from cost_models.comm import CommModel, gradient_bytes, link_busy
from cost_models.model import CostModel, UnknownOpTypeWarning
from cost_models.types import OpCost, Phase

__all__ = ["CommModel", "CostModel", "OpCost", "Phase", "UnknownOpTypeWarning", "gradient_bytes", "link_busy"]
