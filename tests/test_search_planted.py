"""Planted instances: small problems whose optimum is known by enumerating their whole strategy space.

The space is the allreduce-only one (what ``optimize(..., allreduce_only=True)``
searches): every partition of the variables into fusion buckets, numbered in
gradient-ready order, with an algorithm per bucket.  On these instances the
best start of the search (the best baseline, every variable in one bucket,
ring or hierarchical; or training on one replica) is several percent off
the optimum, so only a search whose moves work finds it: the test of the
test runs the same search with a move that does nothing and checks that
the assertion then fails.
"""

import itertools
import json
import os
import random
import subprocess
import sys

import pytest

from autodist.graph.rebatch import at_batch
from autodist.resource_spec import load_cluster
from autodist.strategy import ALLREDUCE_ALGORITHMS, Strategy, VarSync
from placement import Problem, Simulator, baselines, optimize
from placement.search import energy_of
from placement.space import StrategySpace

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# On one node the space offers no algorithm move (every algorithm runs as the ring there), so the walk differs
# from the one 400 moves were chosen for: on the merged main, one seed of the H100 instance still stopped 6e-5 off
# the optimum at 1500 moves, and every seed of both found it at 2000, 3000 and 5000 (each search a few seconds).
MOVES = 3000


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


def partitions(items):
    """Every partition of ``items`` into non-empty blocks."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for blocks in partitions(rest):
        for i in range(len(blocks)):
            yield blocks[:i] + [[first] + blocks[i]] + blocks[i + 1:]
        yield [[first]] + blocks


def allreduce_strategies(problem, replicas):
    """Every allreduce-only strategy of ``replicas``: bucket partitions times an algorithm per bucket."""
    order = problem.ready_order
    for blocks in partitions(list(order)):
        blocks.sort(key=lambda block: order.index(block[0]))
        for algorithms in itertools.product(ALLREDUCE_ALGORITHMS, repeat=len(blocks)):
            sync = {name: VarSync("allreduce", algorithm=algorithm, bucket=k)
                    for k, (block, algorithm) in enumerate(zip(blocks, algorithms)) for name in block}
            yield Strategy(replicas=replicas, sync=sync)


@pytest.fixture(scope="module")
def wide_mlp_graph():
    """A 2048-2048-2048-10 MLP with SGD, captured at 64 samples: compute-heavy enough at thousands of samples that
    every GPU pays, and six variables (a few thousand bucketings to enumerate)."""
    import keras
    import numpy as np

    from autodist.graph.capture import capture_step
    from tests.conftest import _keras_step

    model = keras.Sequential([keras.Input((2048,)), keras.layers.Dense(2048, activation="relu"),
                              keras.layers.Dense(2048, activation="relu"), keras.layers.Dense(10)], name="wide_mlp")
    step = _keras_step(model, keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return capture_step(step, np.zeros((64, 2048), np.float32), np.zeros((64,), np.int32), model_name="wide_mlp")


def planted(graph, preset, cost_model):
    """(optimum energy by enumeration, energy of the best start) of ``graph`` allreduced on ``preset``: the search
    starts from the best baseline and from training undistributed, on one replica."""
    simulator = Simulator(Problem(graph, load_cluster(preset=preset), cost_model))
    data_parallel = baselines.data_parallel(simulator.problem)
    optimum = min(energy_of(simulator.simulate(s))
                  for s in allreduce_strategies(simulator.problem, data_parallel.replicas))
    best_baseline = min(energy_of(c.simulation) for c in baselines.all_baselines(simulator)
                        if c.strategy.allreduces_everything())
    undistributed = StrategySpace(simulator.problem, random.Random(0)).one_replica(data_parallel)
    return optimum, min(best_baseline, energy_of(simulator.simulate(undistributed)))


def finds_optimum(result, optimum):
    return energy_of(result.simulation) <= optimum * (1 + 1e-9)


# (global batch, cluster): one node of 8 H100 on NVSwitch, one of 8 V100 on NVLink
INSTANCES = [(4096, "dgx-h100:1"), (16384, "p3.16xlarge:1")]


@pytest.mark.parametrize("batch, preset", INSTANCES)
def test_search_finds_the_enumerated_optimum(wide_mlp_graph, cost_model, batch, preset):
    graph = at_batch(wide_mlp_graph, batch)
    optimum, best_start = planted(graph, preset, cost_model)
    assert optimum < best_start * (1 - 5e-3)  # the instance is planted: no start is optimal
    for seed in range(3):
        result = optimize(graph, load_cluster(preset=preset), cost_model, seed=seed, moves=MOVES, allreduce_only=True)
        assert finds_optimum(result, optimum), (seed, energy_of(result.simulation), optimum)


def test_a_search_whose_moves_do_nothing_fails_the_same_assertion(wide_mlp_graph, cost_model, monkeypatch):
    """The test of the test: with a move that changes nothing the search returns the best start."""
    batch, preset = INSTANCES[0]
    graph = at_batch(wide_mlp_graph, batch)
    optimum, best_start = planted(graph, preset, cost_model)
    monkeypatch.setattr(StrategySpace, "move", lambda self, strategy: "none")
    result = optimize(graph, load_cluster(preset=preset), cost_model, seed=0, moves=MOVES, allreduce_only=True)
    assert energy_of(result.simulation) == pytest.approx(best_start)
    assert not finds_optimum(result, optimum)


@pytest.mark.slow
def test_moves_give_byte_identical_plans_in_two_processes(embedding_graph, tmp_path):
    """``--moves`` with one seed: the same plan, byte for byte, from two separate processes."""
    graph = tmp_path / "graph.json"
    embedding_graph.save(str(graph))
    plans = []
    for k in range(2):
        out = tmp_path / f"plan{k}.json"
        subprocess.run([sys.executable, "-m", "autodist", "plan", str(graph), "--preset", "g4dn.12xlarge:2",
                        "--moves", "200", "--seed", "5", "-o", str(out)], check=True, cwd=REPO, capture_output=True)
        plans.append(out.read_bytes())
    assert plans[0] == plans[1]
    assert json.loads(plans[0])["provenance"]["search"] == {"budget_s": None, "moves": 200, "moves_made": 200}
