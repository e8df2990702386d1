"""Plans shared by the plan, manifest and emit tests.

Strategies are built by hand from the real captured graphs' variables (a PS
strategy and an allreduce strategy), predicted by the real simulator with the
shipped cost model, on the cluster presets.  No test functions live here.
"""

import functools

import pytest

from autodist.plan import Plan
from autodist.strategy import Strategy, VarSync

RDMA_PRESET = "dgx-h100:2"  # NDR InfiniBand with GPUDirect RDMA
SOCKET_PRESET = "p3.16xlarge:2"  # 25 GbE TCP, no RDMA


@functools.lru_cache(maxsize=None)
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


@functools.lru_cache(maxsize=None)
def cluster(preset):
    from autodist.resource_spec import load_cluster

    return load_cluster(preset=preset)


def allreduce_strategy(graph_item, resource_spec, algorithm="hierarchical", buckets=2):
    """Every GPU one replica; trainable variables round-robin over ``buckets`` buckets."""
    variables = sorted(v.name for v in graph_item.trainable_variables())
    return Strategy(
        replicas=[[d.name] for d in resource_spec.compute_devices()],
        sync={name: VarSync("allreduce", algorithm=algorithm, bucket=i % buckets) for i, name in enumerate(variables)},
    )


def ps_strategy(graph_item, resource_spec):
    """A PS task on every node's CPU; the largest variable sharded over all, the rest round-robin."""
    ps_devices = [d.name for d in resource_spec.devices("CPU")]
    variables = sorted(graph_item.trainable_variables(), key=lambda v: (-v.bytes, v.name))
    sync = {variables[0].name: VarSync("ps", ps_tasks=tuple(range(len(ps_devices))))}
    for i, v in enumerate(variables[1:]):
        sync[v.name] = VarSync("ps", ps_tasks=(i % len(ps_devices),))
    return Strategy(replicas=[[d.name] for d in resource_spec.compute_devices()], sync=sync, ps_devices=ps_devices)


def build_plan(graph_item, preset, kind, seed=0):
    """A plan of the real graph on a preset with a hand-built ``kind`` strategy, simulated for real."""
    from placement import simulate

    resource_spec = cluster(preset)
    strategy = (ps_strategy if kind == "ps" else allreduce_strategy)(graph_item, resource_spec)
    prediction = simulate(graph_item, resource_spec, strategy, cost_model())
    return Plan.from_strategy(graph_item, resource_spec, strategy, prediction, cost_model().id, seed)


@pytest.fixture(scope="session")
def allreduce_rdma_plan(mlp_graph):
    return build_plan(mlp_graph, RDMA_PRESET, "allreduce")


@pytest.fixture(scope="session")
def allreduce_socket_plan(mlp_graph):
    return build_plan(mlp_graph, SOCKET_PRESET, "allreduce")


@pytest.fixture(scope="session")
def ps_plan(embedding_graph):
    return build_plan(embedding_graph, SOCKET_PRESET, "ps")
