"""autodist: plan and run distributed TensorFlow training.

Importing autodist does not import TensorFlow, patch anything or touch files:
the public names below are resolved on first use.
"""

__version__ = "0.1.0"

# public name -> module that defines it
_PUBLIC = {
    "AutoDistError": "autodist.errors",
    "InputError": "autodist.errors",
    "CaptureError": "autodist.errors",
    "GraphItem": "autodist.graph.item",
    "ResourceSpec": "autodist.resource_spec",
    "Strategy": "autodist.strategy",
    "VarSync": "autodist.strategy",
    "Plan": "autodist.plan",
    "function": "autodist.graph.capture",
    "is_chief": "autodist.loops.function",
    "replica_rank": "autodist.loops.function",
    "replica_count": "autodist.loops.function",
    "capture_step": "autodist.graph.capture",
    "capture_script": "autodist.graph.capture",
    "load_graph": "autodist.graph.capture",
    "load_cluster": "autodist.resource_spec",
    "make_plan": "autodist.api",
}

__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name):
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'autodist' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
