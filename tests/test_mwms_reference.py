"""TensorFlow 2's MultiWorkerMirroredStrategy as configured by default, priced as a reference (placement report
--references): every gradient in one pack, summed by TensorFlow's own ring over gRPC, the step without XLA."""

import copy
from dataclasses import replace

import pytest

from autodist.resource_spec import from_preset
from cost_models import CostModel
from placement import Problem, Simulator
from placement.baselines import mwms_step, named
from placement.simulator.collectives import OUTPUTS_LABEL

PRESET = "p3.16xlarge:2"  # two nodes over 25 Gbit/s Ethernet without RDMA


def _one_pack(strategy):
    return replace(strategy, sync={n: replace(s, bucket=0) for n, s in strategy.sync.items()})


def _sync_end(result, label="allreduce"):
    """When the last collective whose label starts with ``label`` ended (the gradients', by default)."""
    return max((end for name, kind, _, _, end in result.events if kind == "sync" and name.startswith(label)),
               default=0.0)


def test_tensorflow_s_ring_moves_the_pack_as_ordinary_ops_do_over_grpc(cnn_graph):
    problem = Problem(cnn_graph, from_preset(PRESET), CostModel.default())
    strategy = _one_pack(named("ring").build(problem))
    devices = tuple(r[0] for r in strategy.replicas)
    assert len(devices) == 16
    total = sum(problem.dense_bytes.values())
    by_hand = sum(p.seconds for p in problem.prices.allreduce_phases(devices, "ring", total, collective_ops=False))
    nccl = sum(p.seconds for p in problem.prices.allreduce_phases(devices, "ring", total, collective_ops=True))
    assert by_hand > nccl  # gRPC between the nodes' processes, where NCCL drives the NICs itself
    # The one pack is summed once its last gradient is ready, when the backward pass ends (on autodist's runtime,
    # once the average of the step's outputs, issued on the same stream before it, has ended too): then for as
    # long as its allreduce takes.
    for simulator, seconds in ((Simulator(problem, ring_reduce=True), by_hand), (Simulator(problem), nccl)):
        result = simulator.simulate(strategy, trace=True)
        start = max(result.compute_time, _sync_end(result, OUTPUTS_LABEL))
        assert _sync_end(result) == pytest.approx(start + seconds, rel=1e-9)


def test_the_reference_is_one_pack_after_the_backward_pass_without_xla(resnet50_graph):
    item = copy.deepcopy(resnet50_graph)
    item.job.jit_compile, item.job.jit_supported = "auto", True  # a default Keras compile: XLA on a GPU
    spec, cost_model = from_preset(PRESET), CostModel.default()
    problem = Problem(item, spec, cost_model)
    ring = named("ring").build(problem)
    with_xla = Simulator(problem).simulate(ring)
    unfused = copy.deepcopy(item)
    unfused.job.jit_compile = "off"
    without_xla = Problem(unfused, spec, cost_model)
    expected = Simulator(without_xla, ring_reduce=True).simulate(_one_pack(named("ring").build(without_xla)))
    reference = mwms_step(problem)
    assert reference.compute_time == pytest.approx(expected.compute_time, rel=1e-9)
    assert reference.compute_time != pytest.approx(with_xla.compute_time, rel=1e-3)
    assert reference.step_time == pytest.approx(expected.step_time, rel=1e-9)
    assert reference.step_time > with_xla.step_time
