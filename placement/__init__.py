"""Placement: strategy space, step simulator, annealing search, baselines, bounds.

Public API::

    from placement import optimize, simulate, baselines, lower_bound

``optimize(graph_item, resource_spec, cost_model, seed=0, budget_s=10.0,
moves=None, progress=None)`` returns a :class:`~placement.search.SearchResult`;
``simulate(graph_item, resource_spec, strategy, cost_model)`` a
:class:`~placement.simulator.SimResult`.  To evaluate many strategies of one
job, build its :class:`~placement.problem.Problem` once and ask a
``Simulator(problem)``; ``baselines`` is the module of baseline strategies
(``baselines.all_baselines(simulator)``), ``lower_bound(problem, replicas)``
the bound.  Importing this package does not import TensorFlow.
"""

from placement import baselines
from placement.baselines import Candidate
from placement.bounds import lower_bound
from placement.problem import Problem
from placement.search import SearchResult, optimize
from placement.simulator import SimResult, Simulator, simulate

__all__ = ["Candidate", "Problem", "SearchResult", "SimResult", "Simulator", "baselines", "lower_bound", "optimize",
           "simulate"]
