"""Parameter servers as the published comparisons with Horovod ran them, beside autodist's runtime.

TensorFlow 1's (placement.baselines.tensorflow_ps_step): every GPU (a tower) pushes its own gradient and reads the
variable from its PS itself, where autodist's runtime sums a node's replicas and pushes and pulls once per node.
AutoDist's PartitionedPS (placement.baselines.autodist_ps_step): each node's proxy of a shard is pulled as soon as
the shard is updated, where autodist's runtime reads every PS variable at the next step's start.
"""

import pytest

from autodist.resource_spec import load_cluster
from cost_models import CostModel
from placement import Problem, Simulator, baselines


@pytest.fixture(scope="module")
def problem(cnn_graph):
    """The captured CNN on two p3.16xlarge (8 V100 a node, 25 GbE): a PS task on each node."""
    return Problem(cnn_graph, load_cluster(preset="p3.16xlarge:2"), CostModel.default())


def test_every_tower_crosses_the_nic_where_the_runtime_sends_one_sum_per_node(problem):
    summed = Simulator(problem).simulate(baselines.named("greedy-ps").build(problem))
    towers = baselines.tensorflow_ps_step(problem)
    for link in ("node-0/nic0/tx", "node-0/nic0/rx", "node-1/nic0/tx", "node-1/nic0/rx"):
        # 8 towers push and pull through the node's NIC, and 8 of the other node's towers are served by its PS: 8
        # copies of the PS bytes where one went (each transfer's latency and the input feeds keep it under 8x)
        assert 6 < towers.link_busy[link] / summed.link_busy[link] <= 8, link
    assert towers.step_time > summed.step_time


def test_tensorflow_s_parameter_servers_lose_to_horovod_on_ethernet(problem):
    """Horovod's README: distributed TensorFlow's PS far behind Horovod on 25 Gb/s; the ring carries
    2(n-1)/n of the gradient through a NIC, the towers 8 copies each way."""
    assert baselines.tensorflow_ps_step(problem).step_time > baselines.horovod_step(problem).step_time


def _first_pull_and_last_update(simulator, strategy):
    events = simulator.simulate(strategy, trace=True).events
    return (min(start for label, _, _, start, _ in events if label.startswith("pull ")),
            max(end for _, kind, _, _, end in events if kind == "update"))


def test_autodist_s_proxies_pull_each_shard_once_it_is_updated(problem):
    strategy = baselines.named("partitioned-ps").build(problem)
    pull, update = _first_pull_and_last_update(Simulator(problem), strategy)
    assert pull >= update  # the runtime: the next step's reads, after the step's last update
    pull, update = _first_pull_and_last_update(Simulator(problem, proxy_pulls=True), strategy)
    assert pull < update  # a shard updated early is on its way back while later ones are still pushed
    assert baselines.autodist_ps_step(problem).step_time == Simulator(problem, proxy_pulls=True).simulate(
        strategy).step_time


def test_horovod_s_gather_of_a_sparse_gradient_pays_its_fixed_cost_once_per_bucket(embedding_graph):
    """Horovod gathers an embedding's IndexedSlices gradient (its indices and values) as a coordinated collective:
    the fixed cost of its fused collectives, once per fused bucket beside the bucket's fused allreduce, which
    autodist's ring (TensorFlow's collective ops) does not pay. Before, the gathers were priced as if free."""
    problem = Problem(embedding_graph, load_cluster(preset="g4dn.12xlarge:2"), CostModel.default())
    ring = baselines.named("ring").build(problem)
    assert problem.sparse_gradients and all(ring.sync[v].method == "allreduce" for v in problem.sparse_gradients)
    buckets = {}
    for name, sync in ring.sync.items():
        buckets.setdefault(sync.bucket, set()).add(name)
    sparse = set(problem.sparse_gradients)
    collectives = sum(bool(names - sparse) + bool(names & sparse) for names in buckets.values())
    assert collectives == 2  # the model's one bucket: its dense layer's allreduce and its embedding's gather
    ours = Simulator(problem).simulate(ring).step_time
    horovod = baselines.horovod_step(problem).step_time
    # Every collective is on the step's path here (the compute is far shorter than one fixed cost).
    assert horovod - ours == pytest.approx(problem.comm.overlap.collective_seconds * collectives, rel=0.05)
