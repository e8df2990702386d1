"""Plans shared by the plan, manifest and emit tests.

Strategies are built by hand from the real captured graphs' variables (a PS
strategy and an allreduce strategy), predicted by the real simulator with the
shipped cost model, on the cluster presets.  No test functions live here.
"""

import functools

import pytest

from autodist.collective_stages import stages
from autodist.errors import PlacementError
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


def draw_plan(data, graph_item):
    """A plan of a random valid strategy (hypothesis ``data``) of the real graph; returns (plan, strategy)."""
    from hypothesis import strategies as st
    from placement import simulate

    spec = cluster(data.draw(st.sampled_from(["dgx-h100", "p3.16xlarge:2", "g4dn.12xlarge:3", "cpu-2s-25g:2"])))
    devices = [d.name for d in spec.compute_devices()]
    count = data.draw(st.integers(1, len(devices)))
    replicas = [[d] for d in data.draw(st.permutations(devices))[:count]]
    cpus = [d.name for d in spec.devices("CPU")]
    ps_count = data.draw(st.integers(0, len(cpus)))
    sync = {}
    try:  # hierarchical cannot run on nodes of uneven replica counts, and is refused there
        stages("hierarchical", [spec.device(r[0]).node for r in replicas])
        algorithms = ["ring", "hierarchical", "master"]
    except PlacementError:
        algorithms = ["ring", "master"]
    for v in sorted(graph_item.trainable_variables(), key=lambda v: v.name):
        if ps_count and data.draw(st.booleans()):
            tasks = data.draw(st.lists(st.integers(0, ps_count - 1), min_size=1, max_size=ps_count, unique=True))
            sync[v.name] = VarSync("ps", ps_tasks=tuple(tasks), axis=0)
        else:
            sync[v.name] = VarSync(
                "allreduce",
                algorithm=data.draw(st.sampled_from(algorithms)),
                bucket=data.draw(st.integers(0, 3)),
            )
    strategy = Strategy(replicas, sync, ps_devices=cpus[:ps_count])
    prediction = simulate(graph_item, spec, strategy, cost_model())
    seed = data.draw(st.integers(0, 2**31))
    return Plan.from_strategy(graph_item, spec, strategy, prediction, cost_model().id, seed), strategy


@pytest.fixture(scope="session")
def allreduce_rdma_plan(mlp_graph):
    return build_plan(mlp_graph, RDMA_PRESET, "allreduce")


@pytest.fixture(scope="session")
def allreduce_socket_plan(mlp_graph):
    return build_plan(mlp_graph, SOCKET_PRESET, "allreduce")


@pytest.fixture(scope="session")
def ps_plan(embedding_graph):
    return build_plan(embedding_graph, SOCKET_PRESET, "ps")
