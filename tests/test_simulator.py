"""The step simulator on real captured graphs with the shipped cost model."""

import copy
from dataclasses import replace
import json
import random
import statistics

import pytest

from autodist.errors import PlacementError
from autodist.graph.item import GraphItem
from cost_models.memory import live_peak, runtime_overhead_bytes
from cost_models.overlap import NcclOverlap, lockstep_pace
from cost_models.step_table import step_table
from autodist.resource_spec import ResourceSpec, load_cluster
from autodist.strategy import Strategy, VarSync
from placement import Problem, Simulator, baselines, simulate
from autodist.report.timeline import chrome_trace
from placement.simulator.links import LinkQueue
from placement.space import StrategySpace, copy_strategy


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


@pytest.fixture(scope="module")
def ethernet():
    """Two g4dn.12xlarge nodes (4 T4 on PCIe each, 50 GbE): communication matters."""
    return load_cluster(preset="g4dn.12xlarge:2")


def per_variable_buckets(strategy, algorithm="ring"):
    sync = {name: VarSync("allreduce", algorithm=algorithm, bucket=i) for i, name in enumerate(sorted(strategy.sync))}
    return Strategy(replicas=strategy.replicas, sync=sync)


def test_overlap_hides_sync_behind_backward(cnn_graph, ethernet, cost_model):
    sim = Simulator(Problem(cnn_graph, ethernet, cost_model))
    strategy = per_variable_buckets(baselines.data_parallel(sim.problem))
    overlapped = sim.simulate(strategy)
    serial = sim.simulate(strategy, overlap=False)
    assert overlapped.compute_time == serial.compute_time
    assert overlapped.step_time < serial.step_time
    assert overlapped.exposed_comm_time < serial.exposed_comm_time
    # gradients become ready at different times of the backward pass
    ready = sim._share(strategy)._schedule(strategy.replicas[0], (), False, 1).gradient_ready
    assert len(set(ready.values())) > 1


def test_replicas_on_one_core_each_allreduce_nothing_while_they_compute(cnn_graph, cost_model):
    """On emulated nodes of one core each (a process runs one op at a time there), buckets of collectives
    do not overlap the backward pass, and do on the same nodes with two cores each; PS pushes, which
    gRPC sends once one Send op has run, overlap it on both."""
    one_core = load_cluster(preset="emu-1gbit:2")
    data = one_core.to_dict()
    two_cores = ResourceSpec.from_dict({**data, "nodes": [{**n, "emulation": {**n["emulation"], "cores": [0, 1]}}
                                                          for n in data["nodes"]]})
    for spec, overlaps in ((one_core, False), (two_cores, True)):
        sim = Simulator(Problem(cnn_graph, spec, cost_model))
        base = baselines.data_parallel(sim.problem)
        assert sim.problem.overlaps_compute(base.replicas) is overlaps
        buckets = per_variable_buckets(base)
        overlapped, serial = sim.simulate(buckets), sim.simulate(buckets, overlap=False)
        assert (overlapped.step_time < serial.step_time) is overlaps
        if not overlaps:
            assert overlapped.step_time == serial.step_time
        ps = _all_on_one_ps(base)
        assert sim.simulate(ps).step_time < sim.simulate(ps, overlap=False).step_time
        pushed = [min(start for label, _, _, start, _ in sim.simulate(ps, trace=True, overlap=overlap).events
                      if label == "push cnn/dense/kernel/0") for overlap in (True, False)]
        assert pushed[0] < pushed[1]  # during the backward pass, not after it


def test_replicas_on_collective_ops_average_their_step_outputs_once_a_step(cnn_graph, cost_model):
    """autodist's runtime averages every replica's loss and metrics with one more collective a step
    (launcher.runtime.collective): priced once, on the gradients' stream, after their last bucket where
    collectives wait for the compute (one-core nodes), and the step ends no sooner than it; one replica
    and plans with PS issue none."""
    from placement.simulator.collectives import OUTPUTS_LABEL as label

    sim = Simulator(Problem(cnn_graph, load_cluster(preset="emu-1gbit:2"), cost_model))
    base = baselines.data_parallel(sim.problem)
    result = sim.simulate(per_variable_buckets(base), trace=True)
    syncs = [(name, start, end) for name, kind, _, start, end in result.events if kind == "sync"]
    averages = [(start, end) for name, start, end in syncs if name == label]
    assert len(averages) == 1
    last_bucket = max(end for name, _, end in syncs if name.startswith("allreduce"))
    assert averages[0][0] >= last_bucket
    assert result.step_time >= averages[0][1]  # events are on the step's clock, the loop's time included
    one = Strategy(replicas=base.replicas[:1], sync=base.sync)
    for strategy in (one, _all_on_one_ps(base)):
        assert all(name != label for name, *_ in sim.simulate(strategy, trace=True).events)


def _all_on_one_ps(base):
    return Strategy(replicas=base.replicas, ps_devices=[base.replicas[0][0]],
                    sync={name: VarSync("ps", ps_tasks=(0,)) for name in base.sync})


def test_a_pull_holds_the_next_step_only_from_its_variable_s_first_reader(cnn_graph, cost_model):
    """TensorFlow runs an op once its inputs are in: the next step's convolutions run while the dense
    layer they feed is still being pulled.  The pull of the dense kernel ends after the step that
    requested it, by at most how long the forward pass runs before reading it, and the step is shorter
    than if every pull were waited for."""
    spec = load_cluster(preset="cpu-2s-25g:2")
    sim = Simulator(Problem(cnn_graph, spec, cost_model))
    base = baselines.data_parallel(sim.problem)
    ps = _all_on_one_ps(base)
    schedule = sim._share(ps)._schedule(ps.replicas[0], (), False, 1)
    kernel, conv = "cnn/dense/kernel", "cnn/conv/kernel"
    assert schedule.pull_needed[conv] < schedule.pull_needed[kernel]
    result = sim.simulate(ps, trace=True)
    assert not result.cpu_bound
    remote = spec.nodes[1].name
    (pull_end,) = [end for label, kind, where, _, end in result.events
                   if label == f"pull {kernel}/0" and f"{remote}/" in where and "nic" in where]
    assert result.step_time < pull_end <= result.step_time + schedule.pull_needed[kernel] + 1e-12
    assert result.step_time < sim.simulate(ps, overlap=False).step_time


def test_two_transfers_on_one_link_take_longer_than_one(mlp_graph, cost_model):
    spec = load_cluster(preset="g4dn.12xlarge:3")
    sim = Simulator(Problem(mlp_graph, spec, cost_model))
    server = baselines.ps_candidates(spec)[0]
    sync = {name: VarSync("ps", ps_tasks=(0,)) for name in sim.problem.dense_bytes}

    def workers(*nodes):
        replicas = [[f"{spec.nodes[n].name}/GPU:0"] for n in nodes]
        return sim.simulate(Strategy(replicas=replicas, sync=sync, ps_devices=[server]))

    one = workers(1)
    two = workers(1, 2)  # both push into the server node's NIC
    nic = f"{spec.nodes[0].name}/nic0/rx"
    # each of two replicas computes half the batch, at the pace of the slower of two GPUs
    pace = sim.problem.comm.lockstep_pace([[f"{spec.nodes[n].name}/GPU:0"] for n in (1, 2)])
    assert pace > 1 and two.compute_time <= one.compute_time * pace
    assert two.link_busy[nic] == pytest.approx(2 * one.link_busy[nic])
    assert two.step_time > one.step_time


def test_gpu_replicas_compute_at_the_pace_of_the_slowest(mlp_graph, cost_model):
    """Eight GPUs that step together wait for the slowest of them: with the fitted spread of GPU speed their
    compute takes lockstep_pace(8) times what it takes when every GPU runs at the typical speed."""
    spec = load_cluster(preset="p3.16xlarge:1")
    fitted = cost_model.comm.overlap
    level = copy.copy(cost_model)
    level.comm = replace(level.comm, overlap=NcclOverlap(fitted.collective_seconds, fitted.contention, 0.0))
    paced_sim, level_sim = (Simulator(Problem(mlp_graph, spec, model)) for model in (cost_model, level))
    strategy = baselines.data_parallel(paced_sim.problem)
    assert len(strategy.replicas) == 8 and fitted.speed_spread > 0
    paced, even = paced_sim.simulate(strategy), level_sim.simulate(strategy)
    assert paced.compute_time == pytest.approx(even.compute_time * lockstep_pace(8, fitted.speed_spread))
    # One replica waits for nobody.
    single = Strategy(replicas=strategy.replicas[:1], sync=strategy.sync)
    assert paced_sim.simulate(single).compute_time == pytest.approx(level_sim.simulate(single).compute_time)


def test_memory_accounts_parameters_slots_and_live_tensors(mlp_graph, ethernet, cost_model):
    sim = Simulator(Problem(mlp_graph, ethernet, cost_model))
    params = mlp_graph.parameter_bytes()
    slots = sum(v.bytes for v in mlp_graph.slot_variables() if v.slot_of in sim.problem.dense_bytes)
    table = step_table(mlp_graph)
    live = live_peak(table)
    gpu = runtime_overhead_bytes(table)  # framework reserve (no convolution: no cuDNN workspace)
    forward = sum(op.total_output_bytes for op in mlp_graph.ops.values() if op.phase == "forward")
    assert slots == 2 * params  # Adam: momentum and velocity
    assert params < live < forward + params  # activations held for backward and gradients held for the update

    allreduce = sim.simulate(baselines.data_parallel(sim.problem))
    for replica in baselines.data_parallel(sim.problem).replicas:
        assert ethernet.device(replica[0]).kind == "GPU"
        assert allreduce.memory[replica[0]] == live + params + slots + gpu

    ps_strategy = baselines.greedy_ps(sim.problem)
    ps = sim.simulate(ps_strategy)
    worker = ps_strategy.replicas[0][0]
    assert ps.memory[worker] == live + params + gpu
    on_servers = sum(ps.memory[d] for d in ps_strategy.ps_devices)
    assert params + slots <= on_servers <= params + slots + len(sim.problem.dense_bytes) * len(ps_strategy.ps_devices)
    assert ps.fits and all(ps.memory[d] <= ps.memory_limit[d] for d in ps.memory)


def test_sparse_gradient_sends_only_touched_rows_to_ps(embedding_graph, ethernet, cost_model):
    sim = Simulator(Problem(embedding_graph, ethernet, cost_model))
    table = next(v for v in embedding_graph.trainable_variables() if v.sparse_gradient)
    assert sim.problem.sparse_bytes[table.name] < table.bytes
    strategy = baselines.parallax(sim.problem)
    assert strategy.sync[table.name].method == "ps"
    assert all(s.method == "allreduce" for n, s in strategy.sync.items() if n != table.name)
    densified = GraphItem.from_dict(embedding_graph.to_dict())
    densified.variables[table.name].sparse_gradient = False
    sparse_run = sim.simulate(strategy)
    dense_run = Simulator(Problem(densified, ethernet, cost_model)).simulate(strategy)
    nic = f"{ethernet.nodes[0].name}/nic0/rx"  # the pushes into the PS node
    assert sparse_run.link_busy[nic] < dense_run.link_busy[nic]
    assert sparse_run.step_time < dense_run.step_time


def test_same_inputs_same_result(mlp_graph, ethernet, cost_model):
    sim = Simulator(Problem(mlp_graph, ethernet, cost_model))
    strategy = baselines.parallax(sim.problem)
    a = simulate(mlp_graph, ethernet, strategy, cost_model)
    b = simulate(mlp_graph, ethernet, strategy, cost_model)
    assert json.dumps(a.to_dict()) == json.dumps(b.to_dict())
    assert json.dumps(chrome_trace(a)) == json.dumps(chrome_trace(b))


def test_cached_evaluation_equals_fresh_simulation(embedding_graph, ethernet, cost_model):
    cached = Simulator(Problem(embedding_graph, ethernet, cost_model))
    space = StrategySpace(cached.problem, random.Random(3))
    strategy = baselines.greedy_ps(cached.problem)
    for _ in range(40):
        strategy = copy_strategy(strategy)
        space.move(strategy)
        strategy.validate(embedding_graph, ethernet)
        fresh = Simulator(Problem(embedding_graph, ethernet, cost_model)).simulate(strategy)
        assert cached.simulate(strategy).to_dict() == fresh.to_dict()


def test_chrome_trace_has_compute_sync_and_update_events(mlp_graph, ethernet, cost_model):
    sim = Simulator(Problem(mlp_graph, ethernet, cost_model))
    result = simulate(mlp_graph, ethernet, baselines.greedy_ps(sim.problem), cost_model)
    trace = chrome_trace(result)
    events = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["cat"] for e in events} == {"client", "compute", "sync", "update"}  # a PS plan runs from one client
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    end = max(e["ts"] + e["dur"] for e in events)
    assert end == pytest.approx(result.step_time * 1e6)
    json.dumps(trace)


def test_allreduce_fit_matches_the_comm_model(mlp_graph, cost_model):
    spec = load_cluster(preset="dgx-h100:2")
    sim = Simulator(Problem(mlp_graph, spec, cost_model))
    devices = tuple(d.name for d in spec.gpus())
    for algorithm in ("ring", "hierarchical", "master"):
        for nbytes in (0, 4, 1000, 3 << 20, 987_654_321):
            for collective_ops in (True, False):
                if collective_ops:
                    direct = sim.problem.comm.allreduce_phases(nbytes, list(devices), algorithm, collective_ops=True)
                else:
                    direct = sim.problem.comm.graph_allreduce_phases(nbytes, list(devices), algorithm)
                fitted = sim.problem.prices.allreduce_phases(devices, algorithm, nbytes, collective_ops)
                assert [p.links for p in fitted] == [p.links for p in direct]
                for f, d in zip(fitted, direct):
                    assert f.seconds == pytest.approx(d.seconds, rel=1e-9, abs=1e-15)


def test_push_and_pull_on_one_nic_finish_together_and_fan_in_queues(cost_model):
    """Links are full duplex: a worker's push and its pull of the same size run at once; pushes
    from two workers into one server still queue on the server NIC's receiving direction."""
    spec = load_cluster(preset="g4dn.12xlarge:3")
    comm = cost_model.comm_model(spec)
    server = baselines.ps_candidates(spec)[0]
    worker, other = (f"{spec.nodes[n].name}/GPU:0" for n in (1, 2))
    nbytes = 64 * 2**20
    (push,) = comm.ps_phases(worker, server, nbytes)
    (pull,) = comm.ps_phases(server, worker, nbytes)
    assert push.seconds == pytest.approx(pull.seconds)
    queue = LinkQueue()
    push_start, push_end = queue.occupy(push.links, 0.0, push.seconds)
    pull_start, pull_end = queue.occupy(pull.links, 0.0, pull.seconds)
    assert push_start == pull_start == 0.0 and push_end == pytest.approx(pull_end)
    (second,) = comm.ps_phases(other, server, nbytes)
    second_start, second_end = queue.occupy(second.links, 0.0, second.seconds)
    assert second_start == pytest.approx(push_end)  # fan-in: behind the first push
    assert second_end == pytest.approx(2 * push.seconds)


def test_a_transfer_takes_a_gap_its_links_leave():
    """A send that waits for a busy receiver does not hold the sender's link idle until then."""
    queue = LinkQueue()
    assert queue.occupy(("a/tx", "b/rx"), 0.0, 10.0) == (0.0, 10.0)
    assert queue.occupy(("c/tx", "b/rx"), 0.0, 4.0) == (10.0, 14.0)  # b receives one at a time
    assert queue.occupy(("c/tx", "d/rx"), 0.0, 6.0) == (0.0, 6.0)  # c sends meanwhile
    assert queue.occupy(("c/tx", "e/rx"), 1.0, 5.0) == (14.0, 19.0)  # no 5 s gap on c before 14
    assert queue.occupy(("f/tx", "b/rx"), 2.0, 0.0) == (2.0, 2.0)  # all latency: holds no link, waits for none
    assert queue.link_busy() == {"a/tx": 10.0, "b/rx": 14.0, "c/tx": 15.0, "d/rx": 6.0, "e/rx": 5.0, "f/tx": 0.0}


def test_local_aggregation_divides_ps_bytes_by_gpus_per_task(mlp_graph, cost_model):
    """A worker task sums its GPUs' gradients before one push and pulls once: the server NIC carries
    what one GPU per task would send, a quarter of four GPUs' separate pushes."""
    spec = load_cluster(preset="g4dn.12xlarge:2")  # 4 T4 per node
    sim = Simulator(Problem(mlp_graph, spec, cost_model))
    server = baselines.ps_candidates(spec)[0]
    sync = {name: VarSync("ps", ps_tasks=(0,)) for name in sim.problem.dense_bytes}
    remote = spec.nodes[1]
    four = Strategy(replicas=[[d.name] for d in remote.gpus()], sync=sync, ps_devices=[server])
    one = Strategy(replicas=[[remote.gpus()[0].name]], sync=sync, ps_devices=[server])
    into, out_of = f"{spec.nodes[0].name}/nic0/rx", f"{spec.nodes[0].name}/nic0/tx"
    per_gpu = sum(p.seconds - min(sim.problem.prices.overhead, p.seconds) for name, nbytes in sim.problem.sparse_bytes.items()
                  for p in sim.problem.comm.ps_phases(remote.gpus()[0].name, server, nbytes))
    by_four, by_one = sim.simulate(four), sim.simulate(one)
    assert by_one.link_busy[into] == pytest.approx(per_gpu)
    assert by_four.link_busy[into] == pytest.approx(by_one.link_busy[into])  # 4 GPUs' bytes / 4
    assert by_four.link_busy[out_of] == pytest.approx(by_one.link_busy[out_of])  # pulled once per task
    # the local sum and the copies back out use the node's PCIe ports, not the NIC
    hub = remote.gpus()[0].name
    assert by_four.link_busy[f"{hub}/fabric/rx"] > 0 and by_four.link_busy[f"{hub}/fabric/tx"] > 0


def test_plans_driven_by_one_client_pay_its_measured_dispatch(mlp_graph, ethernet, cost_model):
    """PS plans run from one client that dispatches every step to each worker and PS task; collective plans
    have every replica run its own loop (the fixture's step function), which on GPUs runs ahead of the kernels
    and on CPUs takes turns with the ops."""
    calibration = cost_model.comm.remote_step
    assert calibration is not None and calibration.measurements and mlp_graph.job.step == "function"
    sim = Simulator(Problem(mlp_graph, ethernet, cost_model))
    ring = sim.simulate(baselines.data_parallel(sim.problem))
    ps_plan = baselines.greedy_ps(sim.problem)
    ps = sim.simulate(ps_plan)
    tasks = len({ethernet.device(d).node for r in ps_plan.replicas for d in r}) + len(set(ps_plan.ps_devices))
    assert ring.client_time == 0.0
    on_cpus = Simulator(Problem(mlp_graph, load_cluster(preset="cpu-2s-25g:2"), cost_model))
    assert on_cpus.simulate(baselines.data_parallel(on_cpus.problem)).client_time == calibration.function_step > 0
    assert ps.client_time == pytest.approx(calibration.base + calibration.per_task * tasks) and tasks >= 3
    assert ps.step_time >= ps.compute_time + ps.client_time


@pytest.mark.parametrize("loop", ["fit", "function"])
def test_the_loop_cost_leaves_the_step_it_was_timed_on_at_its_measured_time(loop, cost_model):
    """A replica's loop cost was timed on the trivial job of cost_models.profiling.loop_probe, whose ops the cost model also
    prices: that job's step, captured and simulated, comes out at the time measured for it, its ops counted once
    (fails where the op model is refitted without `autodist profile remote-steps`)."""
    from autodist.graph.capture import capture_script
    from cost_models.profiling import loop_probe

    calibration = cost_model.comm.remote_step
    probe = capture_script(loop_probe.__file__, ["--loop", loop, "--steps", "2"])
    assert probe.job.step == loop
    problem = Problem(probe, load_cluster(preset="cpu-local:1"), cost_model)
    result = Simulator(problem).simulate(baselines.data_parallel(problem))
    measured = statistics.median(calibration.local_measurements[f"{loop}_step"])
    assert 0 < result.client_time < measured
    assert result.step_time == pytest.approx(measured, rel=1e-9)


def test_replica_processes_on_this_machine_share_its_cores(mlp_graph, cost_model):
    """cpu-local:2 runs both replicas as unpinned processes here: each is priced on half the cores."""
    from autodist.graph.rebatch import at_batch
    from autodist.resource_spec.emulated import machine_cores

    spec = load_cluster(preset="cpu-local:2")
    problem = Problem(mlp_graph, spec, cost_model)
    assert problem.on_this_machine and problem.at_replicas(1) is problem
    two = problem.at_replicas(2)
    assert {cores for _, cores in two.device_model.values()} == {max(1, len(machine_cores()) // 2)}
    # The same half batch as one process with every core computes faster than either replica.
    device = spec.device("local-0/CPU:0")
    alone = Problem(at_batch(mlp_graph, two.graph_item.job.batch_size), spec, cost_model)
    assert sum(two.device_costs(device)[0]) > sum(alone.device_costs(device)[0])
    assert not Problem(mlp_graph, load_cluster(preset="cpu-2s-25g:2"), cost_model).on_this_machine


def _embedding_alone_in_bucket_1(graph_item, cost_model, sparse_sync):
    """Two replicas over 25 GbE allreducing everything, the embedding alone in bucket 1 with ``sparse_sync``:
    ``(problem, its two-replica share, replica devices, embedding, strategy, traced SimResult)``."""
    spec = load_cluster(preset="cpu-2s-25g:2")
    problem = Problem(graph_item, spec, cost_model)
    (embedding,) = problem.sparse_gradients
    strategy = baselines.data_parallel(problem)
    for name in strategy.sync:
        strategy.sync[name] = VarSync("allreduce", algorithm="ring", bucket=int(name == embedding),
                                      sparse_sync=sparse_sync if name == embedding else "gather")
    assert strategy.allreduces_everything() and len(strategy.replicas) == 2
    devices = tuple(r[0] for r in strategy.replicas)
    result = Simulator(problem).simulate(strategy, trace=True)
    return problem, problem.at_replicas(2), devices, embedding, strategy, result


def _bucket_1(result, category, device=None):
    """Durations of bucket 1's events of ``category`` (on ``device`` where given)."""
    return [stop - start for label, kind, where, start, stop in result.events
            if kind == category and label.endswith("bucket 1") and device in (None, where)]


def _occupancy(stages):
    return sum(occupancy for _, occupancy, _ in stages)


def test_a_sparse_gradient_on_collective_ops_is_all_gathered_and_every_replica_updates_all_rows(
        embedding_adam_graph, cost_model):
    """As launcher.runtime.collective runs it: the embedding's rows are all-gathered, not summed as a dense table."""
    problem, share, devices, embedding, _, result = _embedding_alone_in_bucket_1(embedding_adam_graph, cost_model,
                                                                                "gather")
    rows = share.sparse_bytes[embedding]
    assert rows * 10 < share.dense_bytes[embedding]
    gather = share.prices.phase_list(("ag", devices, rows), lambda: share.prices.sparse_allgather_phases(devices, rows))
    assert sum(_bucket_1(result, "sync")) == pytest.approx(_occupancy(gather), rel=1e-6)
    # every replica applies both replicas' rows: the update of the whole batch's rows, more than of its own
    device = problem.resource_spec.device(devices[0])
    own, whole = share.device_costs(device)[1][embedding], problem.device_costs(device)[1][embedding]
    assert _bucket_1(result, "update", devices[0]) == [pytest.approx(whole)] and whole > own


def test_a_densified_sparse_gradient_is_summed_with_its_bucket_and_updates_the_whole_table(
        embedding_adam_graph, cost_model):
    """``sparse_sync: dense``: the table's bytes go through the bucket's sum, and the update streams the table."""

    problem, share, devices, embedding, strategy, result = _embedding_alone_in_bucket_1(
        embedding_adam_graph, cost_model, "dense")
    table = share.dense_bytes[embedding]
    dense = share.prices.phase_list(("ar", devices, "ring", table, True),
                             lambda: share.prices.allreduce_phases(devices, "ring", table, True))
    assert sum(_bucket_1(result, "sync")) == pytest.approx(_occupancy(dense), rel=1e-6)
    assert share.slot_bytes[embedding] > 0  # Adam's two slots stream too
    captured = share.device_costs(problem.resource_spec.device(devices[0]))[1][embedding]
    assert _bucket_1(result, "update", devices[0]) == [
        pytest.approx(max(captured, share.dense_update_seconds(devices[0], embedding)))]
    # The search's move flips exactly that choice, and a PS variable refuses a dense sparse_sync.
    space = StrategySpace(problem, random.Random(0))
    assert "sparse_sync" in space.applicable(strategy)
    space._sparse_sync(strategy)
    assert strategy.sync[embedding].sparse_sync == "gather"
    with pytest.raises(PlacementError, match="sparse_sync"):
        Strategy(replicas=strategy.replicas, ps_devices=[devices[0]],
                 sync={**strategy.sync, embedding: replace(VarSync("ps", ps_tasks=(0,)), sparse_sync="dense")}
                 ).validate(embedding_adam_graph, problem.resource_spec)
