"""Overlap of allreduce with the backward pass falls as the bucket count rises past what one stream can carry.

The zoo's ResNet-50 (214 gradients), data parallel on four p3.16xlarge (32 V100s, 25 GbE between nodes), 64
samples per GPU, ring allreduce on collective ops, the real simulator and shipped cost model.  Collectives of one
group run one at a time on one stream: each pays its fixed latency after the one before it ended.
"""

from dataclasses import replace

import pytest

from autodist.graph.rebatch import at_batch
from autodist.resource_spec import load_cluster
from cost_models import CostModel
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
               for count in (1, 8, 32, 128, len(order))}
    # A few buckets start during the backward pass: most of the allreduce hides behind it.
    assert exposed[8] < exposed[1] / 4
    # Past what the stream carries in the backward pass, every further bucket's fixed cost shows.
    assert exposed[32] < exposed[128] < exposed[len(order)]
    assert exposed[len(order)] > exposed[1]


@pytest.mark.slow
def test_collectives_of_one_group_run_one_after_another(setting):
    sim, base, order = setting
    assert sim.problem.overhead > 0  # TensorFlow's fixed cost per collective over TCP between the nodes
    result = sim.simulate(_bucketed(base, order, len(order)), trace=True)
    spans = {}
    for name, category, _, start, end in result.events:
        if category == "sync" and name.startswith("allreduce"):
            first, last = spans.get(name, (start, end))
            spans[name] = (min(first, start), max(last, end))
    assert len(spans) == len(order)
    spans = sorted(spans.values())
    # Each collective's links are taken only after the one before ended and its own fixed latency passed.
    for (_, before), (after, _) in zip(spans, spans[1:]):
        assert after >= before + sim.problem.overhead * (1 - 1e-9)
