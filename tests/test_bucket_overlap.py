"""Overlap of allreduce with the backward pass falls as the bucket count rises past what one stream can carry.

The zoo's ResNet-50 (214 gradients), data parallel on four p3.16xlarge (32 V100s, 25 GbE between nodes), 64
samples per GPU, ring allreduce on collective ops, the real simulator and shipped cost model.  Collectives of one
group run one at a time on one stream: each pays its fixed latency after the one before it ended, and NCCL's
kernels take the fitted share of the compute they run beside (cost_models.overlap).
"""

import copy
from dataclasses import replace

import pytest

from autodist.graph.rebatch import at_batch
from autodist.resource_spec import load_cluster
from cost_models import CostModel
from cost_models.overlap import NcclOverlap
from placement.baselines import data_parallel
from placement.problem import Problem
from placement.simulator import Simulator


def _bucketed(base, order, count):
    """``base`` with its gradients in ``count`` buckets of consecutive ready order."""
    return replace(base, sync={name: replace(base.sync[name], bucket=i * count // len(order))
                               for i, name in enumerate(order)})


@pytest.fixture(scope="module")
def setting(resnet50_graph):
    spec = load_cluster(preset="p3.16xlarge:4")
    item = at_batch(resnet50_graph, 64 * len(spec.gpus()))
    sim = Simulator(Problem(item, spec, CostModel.default()))
    return sim, data_parallel(sim.problem), sim.problem.ready_order


@pytest.mark.slow
def test_exposed_allreduce_falls_then_rises_with_the_bucket_count(setting):
    sim, base, order = setting
    exposed = {count: sim.simulate(_bucketed(base, order, count)).exposed_comm_time
               for count in (1, 2, 8, 32, 128, len(order))}
    # Two buckets: the first starts during the backward pass and part of the allreduce hides behind it.
    assert exposed[2] < exposed[1] * 0.8
    # Past what the stream carries in the backward pass, every further bucket's fixed cost shows.
    assert exposed[2] < exposed[8] < exposed[32] < exposed[128] < exposed[len(order)]
    # A bucket per gradient gives back more than twice what the best split hides.
    assert exposed[len(order)] > 2 * exposed[2]


@pytest.mark.slow
def test_collectives_of_one_group_run_one_after_another(setting):
    sim, base, order = setting
    result = sim.simulate(_bucketed(base, order, len(order)), trace=True)
    spans = {}
    for name, category, _, start, end in result.events:
        if category == "sync" and name.startswith("allreduce"):
            first, last = spans.get(name, (start, end))
            spans[name] = (min(first, start), max(last, end))
    assert len(spans) == len(order)
    spans = sorted(spans.values())
    # Each collective's links are taken only after the one before ended and its own latency (NCCL's, across the
    # NICs) passed.
    for (_, before), (after, _) in zip(spans, spans[1:]):
        assert after > before


@pytest.mark.slow
def test_exposed_communication_rises_with_the_fitted_contention(setting):
    """Four buckets during the backward pass: with the shipped contention compute runs slower beside them."""
    sim, base, order = setting
    fitted = sim.problem.cost_model.comm.overlap
    assert 0 < fitted.contention <= 1 and fitted.collective_seconds > 0
    free = copy.copy(sim.problem.cost_model)
    free.comm = replace(free.comm, overlap=NcclOverlap(fitted.collective_seconds, 0.0, fitted.speed_spread))
    untouched = Simulator(Problem(sim.problem.graph_item, sim.problem.resource_spec, free))
    strategy = _bucketed(base, order, 4)
    with_contention, without = sim.simulate(strategy), untouched.simulate(strategy)
    assert with_contention.compute_time == without.compute_time
    assert with_contention.exposed_comm_time > without.exposed_comm_time
    # It can take no more than its share of the compute.
    assert with_contention.step_time - without.step_time <= fitted.contention * without.compute_time
    # Collectives that wait for the end of compute take nothing from it.
    assert sim.simulate(strategy, overlap=False).step_time == pytest.approx(untouched.simulate(strategy, overlap=False).step_time)
