"""The partitioned-ps baseline: TensorFlow 2's ParameterServerStrategy with a MinSizePartitioner."""

import pytest

from autodist.resource_spec import load_cluster
from placement import Problem, Simulator, baselines
from placement.baselines import MIN_SHARD_BYTES, min_size_shards


@pytest.fixture(scope="module")
def big_embedding_graph():
    """Embedding(100_000, 16) (6.4 MB) -> mean -> Dense(1): one variable holds nearly every byte; a batch of 16,
    a sample for each GPU of the 4 nodes the tests use."""
    from autodist.graph.capture import capture_step
    from tests.conftest import build_embedding_step

    step, ids, y, _ = build_embedding_step("sgd", rows=100_000, batch_size=16)
    return capture_step(step, ids, y, model_name="big_embedding")


def _bytes_per_task(sim, strategy):
    load = [0] * len(strategy.ps_devices)
    for name, s in strategy.sync.items():
        for task in s.ps_tasks:
            load[task] += sim.problem.dense_bytes[name] / s.shards
    return load


def test_min_size_shards_matches_tensorflows_partitioner():
    import tensorflow as tf

    assert min_size_shards([], 4, 8) == 1  # a scalar is never split
    for shape, max_shards in (((100_000, 16), 8), ((100_000, 16), 32), ((10, 16), 8), ((3, 2**20), 8),
                              ((4097, 16), 8), ((4096 * 3 + 1, 16), 100), ((1, 7), 4)):
        partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(MIN_SHARD_BYTES, max_shards)
        expected = partitioner(tf.TensorShape(shape), tf.float32)[0]
        nbytes = 4 * shape[0] * shape[1]
        assert min_size_shards(list(shape), nbytes, max_shards) == expected, shape


def test_partitioned_ps_spreads_the_bytes_evenly(big_embedding_graph, cost_model):
    spec = load_cluster(preset="g4dn.12xlarge:4")
    sim = Simulator(Problem(big_embedding_graph, spec, cost_model))
    strategy = baselines.partitioned_ps(sim.problem)
    strategy.validate(big_embedding_graph, spec)
    assert len(strategy.ps_devices) == 4
    table = max(sim.problem.dense_bytes, key=sim.problem.dense_bytes.get)
    assert sorted(strategy.sync[table].ps_tasks) == [0, 1, 2, 3]
    spread = _bytes_per_task(sim, strategy)
    assert max(spread) <= 1.001 * min(spread)
    greedy = _bytes_per_task(sim, baselines.greedy_ps(sim.problem))  # the table cannot be split: one task holds it
    assert max(greedy) > 3.9 * sum(greedy) / len(greedy)
    result = sim.simulate(strategy)
    on_servers = [result.memory[d] for d in strategy.ps_devices]
    assert max(on_servers) <= 1.001 * min(on_servers)
    assert "partitioned-ps" in {c.name for c in baselines.all_baselines(sim)}


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()
