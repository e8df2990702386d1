"""Capture one training step of a TensorFlow program as a GraphItem.

Three ways in:

* :func:`capture_step` traces a python step function (forward, tape gradients,
  ``apply_gradients``) with example arguments;
* :func:`capture_script` runs an unchanged ``model.fit`` script, or a custom
  loop whose step is decorated with :func:`function`, and stops it at its
  first training step;
* :func:`load_graph` reads a graph.json, a GraphDef or a SavedModel.

TensorFlow is imported only inside these functions; the hooks of
:func:`capture_script` exist only while it runs.
"""

from autodist.graph.loaders import load_graph
from autodist.graph.script import capture_script
from autodist.graph.trace import capture_step
from autodist.loops.function import function

__all__ = ["capture_step", "capture_script", "function", "load_graph"]
