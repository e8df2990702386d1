"""A one-client step whose processes share a few cores is bound by their CPU work (Simulator._cpu_floor); on
a replica CPU an update beside a collective loses the collective's share of the cores, and one-core replicas
lose to gRPC the CPU of PS transfers beside their compute."""

import dataclasses

import pytest

from autodist.resource_spec import ResourceSpec, load_cluster
from placement import Problem, Simulator, baselines

# An endpoint CPU so large that the CPU floor binds and its slope is the number of gRPC tensor ends on the node.
SLOW_ENDS = (0.05, 0.10)


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


def _simulate(graph_item, preset, cost_model, baseline, tensor_cpu=None):
    """``(problem, strategy, SimResult)`` of ``baseline`` on ``preset``; ``tensor_cpu`` replaces the measured
    CPU per gRPC tensor end (a what-if on the real calibration, not a fake)."""
    problem = Problem(graph_item, load_cluster(preset=preset), cost_model)
    if tensor_cpu is not None:
        problem.comm.remote_step = dataclasses.replace(problem.comm.remote_step, tensor_cpu=tensor_cpu)
    strategy = baselines.named(baseline).build(problem)
    return problem, strategy, Simulator(problem).simulate(strategy)


def _ends_on(node, strategy, problem):
    """gRPC tensor ends on ``node`` of a dense greedy-PS step over one-replica workers, counted by hand: every
    worker pushes each variable to its PS and pulls it back, and the client (on the first node) sends every
    replica its input; a tensor whose two ends are on ``node`` counts twice."""
    spec = problem.resource_spec
    on = lambda device: spec.device(device).node == node  # noqa: E731
    workers = [r[0] for r in strategy.replicas]
    client = workers[0]
    ends = 0
    for sync in strategy.sync.values():
        ps = strategy.ps_devices[sync.ps_tasks[0]]
        ends += sum(2 * (on(w) + on(ps)) for w in workers)  # a push and a pull
    return ends + sum(on(client) + on(w) for w in workers)


def test_every_grpc_tensor_end_on_a_one_core_node_costs_its_cpu(mlp_graph, cost_model):
    results = [_simulate(mlp_graph, "emu-10gbit:2", cost_model, "greedy-ps", tensor_cpu=t) for t in SLOW_ENDS]
    (problem, strategy, slow), (_, _, slower) = results
    assert len(strategy.replicas) == 2 and all(s.method == "ps" for s in strategy.sync.values())
    assert not problem.sparse_gradients
    node, floor = slower.cpu_bound
    ends = {n.name: _ends_on(n.name, strategy, problem) for n in problem.resource_spec.nodes}
    assert slower.step_time == floor and slow.cpu_bound[0] == node == max(ends, key=ends.get)
    cores = len(problem.resource_spec.node(node).emulation.cores)
    ends = ends[node]
    assert ends > 20
    assert slower.step_time - slow.step_time == pytest.approx(ends * (SLOW_ENDS[1] - SLOW_ENDS[0]) / cores)


def test_the_measured_cpu_puts_a_ps_step_on_one_core_nodes_at_least_at_their_work(mlp_graph, cost_model):
    problem, strategy, result = _simulate(mlp_graph, "emu-10gbit:2", cost_model, "greedy-ps")
    comm = problem.comm
    client, per_task = comm.client_cpu_seconds(len(problem.remote_tasks(strategy)))
    assert client > 0 and per_task > 0 and comm.endpoint_cpu_seconds(1 << 20) > comm.endpoint_cpu_seconds(4096) > 0
    node0 = sum(seconds for device, seconds in result.device_busy.items() if device.startswith("emu-0/"))
    # the client and two tasks (a worker, a PS) run on emu-0's one core, beside its compute and updates
    assert result.step_time > node0 + client + 2 * per_task


def test_plans_on_collective_ops_and_nodes_with_their_own_cores_have_no_cpu_floor(mlp_graph, cost_model):
    _, _, ring = _simulate(mlp_graph, "emu-10gbit:2", cost_model, "ring", tensor_cpu=SLOW_ENDS[1])
    assert ring.cpu_bound == ()  # its collectives' CPU is in their measured curves
    _, _, ps = _simulate(mlp_graph, "cpu-2s-25g:2", cost_model, "greedy-ps", tensor_cpu=SLOW_ENDS[1])
    _, _, as_measured = _simulate(mlp_graph, "cpu-2s-25g:2", cost_model, "greedy-ps")
    assert ps.cpu_bound == () and ps.step_time == as_measured.step_time


def test_a_bucket_s_update_beside_the_next_collective_shares_a_one_core_node(resnet50_graph, cost_model):
    """On collective ops a bucket's update runs beside the next bucket's collective; on one core the collective
    takes its measured share of the core (CommModel.compute_contention), so the updates end that much later."""
    from autodist.strategy import Strategy, VarSync

    problem = Problem(resnet50_graph, load_cluster(preset="emu-10gbit:2"), cost_model)
    ring = baselines.data_parallel(problem)
    buckets = 8
    order = problem.ready_order
    split = Strategy(ring.replicas, {name: VarSync("allreduce", algorithm="ring", bucket=i * buckets // len(order))
                                     for i, name in enumerate(order)})
    result = Simulator(problem).simulate(split, trace=True)
    syncs = [(a, b) for _, kind, _, a, b in result.events if kind == "sync"]
    updates = [(a, b) for _, kind, where, a, b in result.events if kind == "update" and where.startswith("emu-0/")]
    beside = sum(max(0.0, min(b, d) - max(a, c)) for a, b in syncs for c, d in updates)
    assert len(updates) == buckets and beside > 0
    last = max(b for *_, b in result.events)
    assert result.step_time > last + 0.2 * beside  # the updates lost a share of the time beside the collectives


def test_a_model_parallel_replica_s_activations_between_nodes_cost_their_ends_cpu(mlp_graph, cost_model):
    """A replica split over two one-core nodes sends activations and their gradients between the nodes' worker
    tasks over gRPC, once per micro-batch: a second micro-batch adds, on each node, one tensor end per op-group
    edge that crosses between the nodes (counted by hand), and no other tensor end."""
    from autodist.strategy import Strategy, VarSync

    spec = load_cluster(preset="emu-10gbit:2")
    devices = [d.name for d in spec.devices()]
    floors, crossing = {}, None
    for micro_batches in (1, 2):
        for tensor_cpu in SLOW_ENDS:
            problem = Problem(mlp_graph, spec, cost_model)
            problem.comm.remote_step = dataclasses.replace(problem.comm.remote_step, tensor_cpu=tensor_cpu)
            units = problem.groups.units
            later = {unit: 1 for unit in units[len(units) // 2:]}
            strategy = Strategy([devices], {v.name: VarSync("ps", ps_tasks=(0,)) for v in problem.variables},
                                [devices[0]], later, micro_batches)
            result = Simulator(problem).simulate(strategy)
            node, floors[micro_batches, tensor_cpu] = result.cpu_bound
            assert node == "emu-0" and result.step_time == floors[micro_batches, tensor_cpu]
            slot = [later.get(units[problem.group_unit[g]], 0) for g in range(len(problem.groups.groups))]
            crossing = sum(slot[g] != slot[h] for g, succs in enumerate(problem.groups.successors()) for h, _ in succs)
    assert crossing > 0
    slope = {m: floors[m, SLOW_ENDS[1]] - floors[m, SLOW_ENDS[0]] for m in (1, 2)}
    cores = len(spec.node("emu-0").emulation.cores)
    assert slope[2] - slope[1] == pytest.approx(crossing * (SLOW_ENDS[1] - SLOW_ENDS[0]) / cores)


def test_grpc_cpu_beside_the_compute_of_one_core_replicas_delays_it(cnn_graph, cost_model):
    """A PS push during the backward pass and a pull during the next forward pass spend their tensors' CPU on
    cores that one-core replicas compute on: the step grows by at most that CPU, where the CPU floor does not
    bind; on two cores a node's gRPC has a core of its own and the timeline stays as it was."""
    one_core = load_cluster(preset="emu-1gbit:2")
    data = one_core.to_dict()
    two_cores = ResourceSpec.from_dict({**data, "nodes": [{**n, "emulation": {**n["emulation"], "cores": [0, 1]}}
                                                          for n in data["nodes"]]})
    for spec, delayed in ((one_core, True), (two_cores, False)):
        steps = []
        for free_cpu in (True, False):
            problem = Problem(cnn_graph, spec, cost_model)
            if free_cpu:  # a what-if on the real calibration: gRPC's tensors cost their ends no CPU
                problem.comm.remote_step = dataclasses.replace(problem.comm.remote_step, tensor_cpu=0.0,
                                                               tensor_cpu_rate=float("inf"))
            strategy = baselines.named("greedy-ps").build(problem)
            result = Simulator(problem).simulate(strategy)
            assert not result.cpu_bound
            steps.append(result.step_time)
        if not delayed:
            assert steps[1] == pytest.approx(steps[0])
            continue
        assert steps[1] > steps[0]
        ps_ends = problem.grpc_cpu([(w[0], strategy.ps_devices[s.ps_tasks[0]], problem.sparse_bytes[name], 2)
                                    for name, s in strategy.sync.items() for w in strategy.replicas])
        assert steps[1] - steps[0] <= max(ps_ends.values())
