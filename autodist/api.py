"""The Python API: from a training job and a cluster to a Plan in one call."""

from __future__ import annotations

import os

from autodist.errors import InputError
from autodist.graph.job_options import with_job_options  # noqa: F401  (part of the API)


def graph_of(source, script_args=()):
    """A GraphItem from a GraphItem, a training script (``.py``) or a graph file."""
    from autodist.graph.item import GraphItem

    if isinstance(source, GraphItem):
        return source
    if not isinstance(source, (str, os.PathLike)):
        raise InputError(f"expected a GraphItem or a path, got {type(source).__name__}", field="source")
    path = os.fspath(source)
    if path.endswith(".py"):
        from autodist.graph.capture import capture_script

        return capture_script(path, script_args)
    from autodist.graph.capture import load_graph

    return load_graph(path)


def cluster_of(cluster):
    """A ResourceSpec from a ResourceSpec, a cluster file or a preset ``"NAME[:N]"``."""
    from autodist.resource_spec import ResourceSpec, load_cluster

    if isinstance(cluster, ResourceSpec):
        return cluster
    if not isinstance(cluster, (str, os.PathLike)):
        raise InputError(f"expected a ResourceSpec, a file or a preset name, got {type(cluster).__name__}", field="cluster")
    if os.path.exists(cluster):
        return load_cluster(path=os.fspath(cluster))
    return load_cluster(preset=str(cluster))


def plan_with_search(source, cluster, seed=0, budget_s=10.0, progress=None, script_args=(), allreduce_only=False,
                     precision=None, micro_batches=None, xla=None, cost_model=None, allow_compression=False,
                     allow_micro_batches=False, moves=None, global_batch=None, batch_per_replica=False):
    """Search the best placement of a training job on a cluster: the plan and the search that made it.

    Parameters
    ----------
    source : GraphItem, or path of a training script (.py), graph.json, GraphDef or SavedModel
    cluster : ResourceSpec, path of a cluster file, or a preset ``"NAME[:N]"``
    seed : int
        Seed of the search; with ``moves``, same inputs and seed give the same plan.
    budget_s : float
        Search budget in seconds of wall clock.
    progress : callable, optional
        Passed to ``placement.optimize``.
    script_args : sequence of str
        Command-line arguments of a training script.
    allreduce_only : bool
        Search only plans that allreduce every variable, one device per
        replica (a custom training loop's job gets only those whatever this
        says, see ``JobInfo.why_collective_only``).
    precision, micro_batches, xla : optional
        Override the job's precision, gradient accumulation and XLA setting
        (see :func:`with_job_options`).
    cost_model : cost_models.CostModel, optional
        The cost model to plan with (default: the shipped one).
    allow_compression : bool
        Let the search send allreduce buckets as fp16 or bf16 (rounds the gradients).
    allow_micro_batches : bool
        Let the search change the micro-batches each step accumulates (the global batch stays).
    moves : int, optional
        Search exactly this many moves instead of ``budget_s``: the same
        plan, byte for byte, on any machine.
    global_batch : int, optional
        Plan the job at this global batch instead of the script's.
    batch_per_replica : bool
        Every replica runs the script's batch (the global batch is the
        cluster's compute devices times it); see :mod:`autodist.graph.semantics`.

    Returns
    -------
    (autodist.plan.Plan, placement.search.SearchResult)
    """
    from cost_models import CostModel
    from placement import optimize

    from autodist.graph.semantics import planned_batch
    from autodist.plan import Plan

    graph_item = with_job_options(graph_of(source, script_args), precision, micro_batches, xla)
    resource_spec = cluster_of(cluster)
    graph_item = planned_batch(graph_item, len(resource_spec.compute_devices()), global_batch, batch_per_replica)
    cost_model = cost_model or CostModel.default()
    result = optimize(graph_item, resource_spec, cost_model, seed=seed, budget_s=budget_s, moves=moves,
                      progress=progress, allreduce_only=allreduce_only, allow_compression=allow_compression,
                      allow_micro_batches=allow_micro_batches)
    return Plan.build(graph_item, resource_spec, result, cost_model.id, seed), result


def make_plan(source, cluster, **options):
    """The plan of :func:`plan_with_search` (the same arguments), without its search result.

    Returns
    -------
    autodist.plan.Plan
    """
    return plan_with_search(source, cluster, **options)[0]


def priced_plan(graph_item, plan, cost_model=None):
    """``plan`` (its strategy, on its cluster) for ``graph_item``, predicted by the simulator that prices every plan
    (``placement.simulate``): how ``autodist run`` prices a training phase the runtime planned where it started
    (launcher.runtime.phases), which the launcher cannot price itself.

    Returns
    -------
    autodist.plan.Plan
    """
    from cost_models import CostModel
    from placement import simulate

    from autodist.plan import Plan

    cost_model = cost_model or CostModel.default()
    simulation = simulate(graph_item, plan.resource_spec, plan.strategy, cost_model)
    return Plan.from_strategy(graph_item, plan.resource_spec, plan.strategy, simulation, cost_model.id,
                              plan.provenance.get("seed", 0), name=plan.name)
