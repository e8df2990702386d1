"""How the simulator orders a PS step's transfers, as the one-client runtime (launcher.runtime.trainer) runs them.

Every task's pushes of one variable are in flight at once, so no NIC idles
while another is oversubscribed by the order they were requested in; the
pulls are the next step's reads, which start when the step's last update
has ended; each replica gathers its own rows of a sparse variable on the PS,
whose update runs on every replica's rows.
"""

import pytest

from autodist.resource_spec import load_cluster
from placement import Problem, Simulator, baselines

CLUSTER = "p3.16xlarge:4"  # 4 nodes of 8 V100 on NVLink, 25 GbE: the NIC is the narrowest link


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


@pytest.fixture(scope="module")
def wide_dense_graph():
    """Dense(1024 -> 4096) -> Dense(10) with Adam: a 16 MiB kernel holds nearly every byte; a batch of 32, a
    sample for each GPU of the cluster."""
    import keras
    import numpy as np

    from autodist.graph.capture import capture_step
    from tests.conftest import _keras_step

    model = keras.Sequential([keras.Input((1024,)), keras.layers.Dense(4096, activation="relu"),
                              keras.layers.Dense(10)], name="wide_dense")
    step = _keras_step(model, keras.optimizers.Adam(1e-3),
                       keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return capture_step(step, np.zeros((32, 1024), np.float32), np.zeros((32,), np.int32), model_name="wide_dense")


def _traced_partitioned_ps(graph, cost_model):
    spec = load_cluster(preset=CLUSTER)
    sim = Simulator(Problem(graph, spec, cost_model))
    strategy = baselines.partitioned_ps(sim.problem)
    return sim, strategy, sim.simulate(strategy, trace=True)


def test_the_pushes_of_a_partitioned_variable_keep_every_nic_busy(wide_dense_graph, cost_model):
    """The kernel's shards, one per node, are pushed by every task: its exchange ends when the busiest NIC has
    moved its pushes, not later (every task pushing shard 0 first would queue them all on shard 0's PS)."""
    sim, strategy, result = _traced_partitioned_ps(wide_dense_graph, cost_model)
    kernel = max(sim.problem.dense_bytes, key=sim.problem.dense_bytes.get)
    assert len(strategy.sync[kernel].ps_tasks) == 4
    pushes = [(res, start, end) for name, kind, res, start, end in result.events
              if name.startswith(f"push {kernel}/") and "/nic" in res]
    assert len(pushes) == 4 * 3  # every task to the three PS tasks on other nodes
    per_nic = {}
    for res, start, end in pushes:
        for link in res.split("+"):
            per_nic[link] = per_nic.get(link, 0.0) + end - start
    first, last = min(start for _, start, _ in pushes), max(end for _, _, end in pushes)
    assert last - first == pytest.approx(max(per_nic.values()), rel=0.01)


def test_pulls_start_when_the_step_has_ended(wide_dense_graph, cost_model):
    """The runtime's step is one function call: the next step's reads of PS variables (the pulls) start once
    every push and update of this one has ended."""
    _, _, result = _traced_partitioned_ps(wide_dense_graph, cost_model)
    pulls = [start for name, _, _, start, _ in result.events if name.startswith("pull ")]
    before = [end for name, _, _, _, end in result.events if name.startswith(("push ", "update "))]
    assert pulls and min(pulls) >= max(before) - 1e-12


def test_every_replica_gathers_its_own_rows_on_the_ps_whose_update_takes_every_replicas_rows(embedding_graph,
                                                                                              cost_model):
    sim, strategy, result = _traced_partitioned_ps(embedding_graph, cost_model)
    problem = sim.problem.at_replicas(len(strategy.replicas))
    table = next(iter(problem.sparse_gradients))
    shards = strategy.sync[table].ps_tasks
    pulls = [res for name, _, res, _, _ in result.events if name.startswith(f"pull {table}/")]
    assert len(pulls) == len(shards) * len(strategy.replicas)  # every replica's rows of every shard
    assert not any("GPU" in res.split("+")[0] for res in pulls)  # straight from the PS, no copy between GPUs
    ps_device = strategy.ps_devices[shards[0]]
    updates = [end - start for name, _, _, start, end in result.events if name.startswith(f"update {table}/")]
    expected = problem.gathered_update_seconds(ps_device, table) / len(shards)
    assert len(updates) == len(shards) and all(u == pytest.approx(expected) for u in updates)
    one_replicas = problem.device_costs(problem.resource_spec.device(ps_device))[1][table] / len(shards)
    assert expected > one_replicas


def test_the_client_sends_every_replica_its_input_slice_with_the_pulls(wide_dense_graph, cost_model):
    """The one client (the chief, on the first worker's node) is called with the global batch and slices it to the
    replicas: each replica receives its slice over gRPC as the next step begins, beside the pulls, over the NICs
    from another node and over its node's own port on the client's node (the client is a process of its own).
    Collective plans read their input in every replica."""
    sim, strategy, result = _traced_partitioned_ps(wide_dense_graph, cost_model)
    spec = sim.problem.resource_spec
    first_node = spec.device(strategy.replicas[0][0]).node
    remote = {r[0] for r in strategy.replicas if spec.device(r[0]).node != first_node}
    inputs = {name[len("input to "):]: (res, start, end) for name, _, res, start, end in result.events
              if name.startswith("input to ")}
    assert set(inputs) == {r[0] for r in strategy.replicas} and len(remote) == 24
    problem = sim.problem.at_replicas(len(strategy.replicas))
    nbytes = problem.input_bytes
    assert nbytes == wide_dense_graph.input_bytes() // 32  # one sample of 1024 floats and its label each
    pulls = [start for name, _, _, start, _ in result.events if name.startswith("pull ")]
    starts = [start for _, start, _ in inputs.values()]
    assert min(starts) >= min(pulls) - 1e-12
    nic = spec.nodes[0].nics[0].bandwidth
    assert all(end - start >= nbytes / nic for d, (_, start, end) in inputs.items() if d in remote)
    assert all(("nic" in res) == (d in remote) for d, (res, _, _) in inputs.items())
    assert all(res == f"{d}/fabric/tx+{d}/fabric/rx" for d, (res, _, _) in inputs.items() if d not in remote)
    ring = sim.simulate(baselines.data_parallel(sim.problem), trace=True)
    assert not any(name.startswith("input to ") for name, *_ in ring.events)
