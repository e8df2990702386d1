"""The report explains its numbers: counterfactuals priced by re-simulating, exposed communication apart
from the updates, and a bottleneck sentence tied to the busiest resource.

Plans here are made from baseline strategies (not from a search), so every
assertion holds for a known strategy; each expectation is checked against
the simulator by hand.
"""

import dataclasses
import os
import re

import jsonschema
import pytest

from autodist.plan import Plan
from autodist.report import build_report, render, schema
from autodist.report.render import ms
from autodist.resource_spec import from_preset
from autodist.strategy import ALLREDUCE_ALGORITHMS, Strategy, VarSync
from cost_models import CostModel
from placement import Problem, Simulator
from placement.baselines import named
from tests.test_report import LONG_NUMBER

EMBEDDING = "deep_embedding/embeddings"


def baseline_report(graph_item, preset, baseline, sparse_sync="gather"):
    """``(plan, report document, simulator)`` of the plan that follows baseline ``baseline``, its allreduced
    sparse gradients travelling as ``sparse_sync`` says."""
    spec, cost_model = from_preset(preset), CostModel.default()
    simulator = Simulator(Problem(graph_item, spec, cost_model))
    strategy = named(baseline).build(simulator.problem)
    for name in simulator.problem.sparse_gradients:
        if strategy.sync[name].method == "allreduce":
            strategy.sync[name] = dataclasses.replace(strategy.sync[name], sparse_sync=sparse_sync)
    plan = Plan.from_strategy(graph_item, spec, strategy, simulator.simulate(strategy), cost_model.id, seed=0)
    return plan, build_report(plan, graph_item, cost_model=cost_model), simulator


def _changed(strategy, changes):
    return Strategy(strategy.replicas, {**strategy.sync, **changes}, strategy.ps_devices, strategy.group_slots)


def _fresh_bucket(strategy):
    return 1 + max((s.bucket for s in strategy.sync.values() if s.method == "allreduce"), default=-1)


def test_exposed_comm_excludes_the_update(mlp_graph):
    plan, doc, simulator = baseline_report(mlp_graph, "dgx-h100:2", "ring")
    p = doc["plan"]
    assert p["client_time"] == 0.0, "on GPUs each replica's own loop runs ahead of its kernels"
    assert p["exposed_comm_time"] + p["update_time"] == pytest.approx(p["step_time"] - p["compute_time"])

    # After the last transfer ends only updates run: all of that is update time, none of it communication.
    traced = simulator.simulate(plan.strategy, trace=True)
    transfers_end = max(max(e[4] for e in traced.events if e[1] == "sync"), traced.compute_time)
    after_transfers = traced.step_time - transfers_end
    assert after_transfers > 0 and p["update_time"] == pytest.approx(max(p["update_time"], after_transfers), rel=1e-12)
    assert p["exposed_comm_time"] <= transfers_end - traced.compute_time + 1e-12

    row = next(line for line in render(doc).splitlines() if line.startswith("autodist "))
    assert re.search(rf"{ms(p['exposed_comm_time'])}\s+{ms(p['update_time'])}", row), "side by side"


def test_bottleneck_is_compute_when_the_busiest_gpu_is_saturated(mlp_graph):
    _, doc, _ = baseline_report(mlp_graph, "dgx-h100:1", "ring")
    b, p = doc["bottleneck"], doc["plan"]
    # Most of the step comes after compute (updates, mostly), yet the busiest GPU is nearly always busy.
    assert 1 - p["compute_time"] / p["step_time"] > 0.2
    assert b["busiest_device"]["busy_fraction"] >= 0.9
    assert b["busiest_device"]["busy_fraction"] > b["busiest_link"]["busy_fraction"]
    assert b["bound_by"] == "compute"
    assert b["sentence"].startswith("Compute-bound") and b["busiest_device"]["resource"] in b["sentence"]
    assert "latency" not in b["sentence"] and "links" in b["sentence"]


def test_latency_sentence_when_the_latency_terms_dominate(mlp_graph):
    plan, doc, simulator = baseline_report(mlp_graph, "cpu-2s-25g:2", "ring")
    b = doc["bottleneck"]
    # By hand: each fused bucket's collective at 0 bytes (its latency terms) and at its bytes.
    devices = tuple(r[0] for r in plan.strategy.replicas)
    buckets = {}
    for name, s in plan.strategy.sync.items():
        buckets[s.bucket] = buckets.get(s.bucket, 0) + simulator.problem.dense_bytes[name]

    def collectives(scale):
        return sum(phase.seconds for nbytes in buckets.values()
                   for phase in simulator.problem.prices.allreduce_phases(devices, "ring", nbytes * scale, collective_ops=True))

    assert b["latency_share"] == pytest.approx(collectives(0) / collectives(1))
    assert b["latency_share"] > 0.5 and b["exposed_comm_fraction"] > 0.2
    assert b["bound_by"] == "latency" and "latency dominates" in b["sentence"]


def test_bucket_counterfactual_matches_resimulating_by_hand(mlp_graph):
    plan, doc, simulator = baseline_report(mlp_graph, "dgx-h100:2", "ring")
    strategy = plan.strategy
    base = simulator.simulate(strategy).step_time
    buckets = [i for i in doc["counterfactuals"]["items"] if i["subject"] == "bucket"]
    assert len(buckets) == doc["counterfactuals"]["buckets"] == len({s.bucket for s in strategy.sync.values()})
    for item in buckets:
        assert item["name"].startswith("ring bucket ")
        number = int(item["name"].split()[-1])
        names = [n for n, s in strategy.sync.items() if s.bucket == number]
        assert item["chosen"] == "ring" and item["variables"] == len(names)
        by_hand = {}
        for algorithm in set(ALLREDUCE_ALGORITHMS) - {"ring"}:
            moved = {n: VarSync("allreduce", algorithm=algorithm, bucket=_fresh_bucket(strategy)) for n in names}
            by_hand[algorithm] = simulator.simulate(_changed(strategy, moved)).step_time - base
        assert item["alternative"] == min(by_hand, key=lambda a: (by_hand[a], a))
        assert item["delta_seconds"] == pytest.approx(by_hand[item["alternative"]], abs=1e-12)
        assert item["each"] == pytest.approx(by_hand, abs=1e-12) and item["not_offered"] == {}
        assert all(algorithm in item["sentence"] for algorithm in by_hand)


@pytest.mark.parametrize("preset, offered", [("dgx-h100:4", ("hierarchical", "master", "ring")),
                                             ("dgx-h100:2", ("hierarchical", "master", "ring")),
                                             ("dgx-h100", ("ring",))])
def test_each_bucket_shows_every_algorithm_and_the_plan_runs_the_one_it_chose(cnn_graph, preset, offered):
    """A CNN's hierarchical plan: per bucket, the counterfactual of each other algorithm that runs differently
    on the cluster, and why the others are not offered (one node: the same as ring); the runtime's layout
    (launcher.runtime.layout) issues the plan's algorithm for every bucket, as its stages."""
    from autodist.collective_stages import stages
    from launcher.runtime.layout import RunLayout

    plan, doc, simulator = baseline_report(cnn_graph, preset, "hierarchical")
    buckets = [i for i in doc["counterfactuals"]["items"] if i["subject"] == "bucket"]
    assert buckets
    for item in buckets:
        assert item["chosen"] == "hierarchical"
        assert sorted(item["each"]) == sorted(set(offered) - {"hierarchical"})
        assert sorted(item["not_offered"]) == sorted(set(ALLREDUCE_ALGORITHMS) - set(offered))
        assert all("same as ring on one node" in why for why in item["not_offered"].values())
    jsonschema.validate(doc, schema())
    layout = RunLayout.from_plan(plan)
    for bucket, algorithm, names in layout.buckets():
        assert {plan.strategy.sync[n].algorithm for n in names} == {algorithm} == {"hierarchical"}
        issued = stages(algorithm, layout.replica_nodes)
        assert len(issued) == (3 if len(offered) > 1 else 1)


def test_client_dispatch_is_apart_from_compute_and_communication(mlp_graph):
    plan, doc, simulator = baseline_report(mlp_graph, "p3.16xlarge:2", "greedy-ps")
    p, b = doc["plan"], doc["bottleneck"]
    # By hand: the client drives 2 worker and 2 PS tasks.
    assert p["client_time"] > 0 and p["client_time"] == pytest.approx(simulator.problem.comm.client_step_seconds(4))
    assert p["exposed_comm_time"] + p["update_time"] == pytest.approx(
        p["step_time"] - p["client_time"] - p["compute_time"])
    assert b["client_fraction"] == pytest.approx(p["client_time"] / p["step_time"])
    # The dispatch is the longest wait of this small step, and no resource is nearly always busy.
    assert b["client_fraction"] > max(b["exposed_comm_fraction"], b["exposed_update_fraction"], 0.2)
    assert b["bound_by"] == "client" and b["sentence"].startswith("Client-bound")
    assert ms(p["client_time"]) in b["sentence"]
    assert f"the loop that drives the step takes {ms(p['client_time'])}" in " ".join(render(doc).split())


@pytest.fixture(scope="module")
def wide_deep_graph(zoo_dir):
    """The zoo's wide-and-deep recommender (1M-row embeddings, sparse Adagrad updates)."""
    from autodist.graph.capture import capture_script

    return capture_script(os.path.join(zoo_dir, "wide_deep.py"), ["--batch-size", "256"])


@pytest.mark.slow
def test_ps_for_the_embedding_is_explained_by_resimulating(wide_deep_graph):
    plan, doc, simulator = baseline_report(wide_deep_graph, "p3.16xlarge:2", "partitioned-ps")
    jsonschema.validate(doc, schema())
    strategy = plan.strategy
    item = next(i for i in doc["counterfactuals"]["items"] if i["name"] == EMBEDDING)
    assert item["subject"] == "variable" and item["chosen"].startswith("PS")
    assert item["dense_bytes"] == wide_deep_graph.variables[EMBEDDING].bytes > item["sparse_bytes"] > 0

    base = simulator.simulate(strategy).step_time
    by_hand = {}
    for algorithm in ALLREDUCE_ALGORITHMS:
        for mode, how in (("gather", "rows gathered"), ("dense", "densified")):
            allreduced = VarSync("allreduce", algorithm=algorithm, bucket=_fresh_bucket(strategy), sparse_sync=mode)
            by_hand[f"allreduce {algorithm} ({how})"] = simulator.simulate(
                _changed(strategy, {EMBEDDING: allreduced})).step_time - base
    best = min(by_hand, key=by_hand.get)  # ties (a gather is a ring whatever the bucket's algorithm): the first
    assert item["alternative"] == best
    assert item["delta_seconds"] == pytest.approx(by_hand[best], abs=1e-12)
    # (with its rows gathered, allreduce now beats this baseline's PS: the sentence says what it would save)
    verb = "add" if item["delta_seconds"] > 0 else "save"
    assert f"would {verb} {ms(abs(item['delta_seconds']))}" in item["sentence"]
    assert "of touched rows" in item["sentence"]
    text = render(doc)
    assert " ".join(item["sentence"].split()) in " ".join(text.split())
    assert not LONG_NUMBER.search(text) and not LONG_NUMBER.search(render(doc, "markdown"))


@pytest.mark.slow
def test_queueing_is_not_called_latency(wide_deep_graph):
    # The embeddings' tables densified and summed: bytes to queue behind (their gathered rows are few).
    _, doc, _ = baseline_report(wide_deep_graph, "g4dn.12xlarge:2", "hierarchical", sparse_sync="dense")
    b = doc["bottleneck"]
    # The step waits on transfers longer than any link is busy, but their time is bytes, not latency.
    assert b["exposed_comm_fraction"] > 0.2 and b["busiest_link"]["busy_fraction"] < b["exposed_comm_fraction"]
    assert max(b["busiest_link"]["busy_fraction"], b["busiest_device"]["busy_fraction"]) < 0.9
    assert b["latency_share"] < 0.5
    assert b["bound_by"] == "communication"
    assert "latency dominates" not in b["sentence"] and "Faster links" in b["sentence"]


@pytest.mark.slow
def test_a_worse_decision_shows_what_it_costs(wide_deep_graph):
    plan, doc, simulator = baseline_report(wide_deep_graph, "p3.16xlarge:2", "ring", sparse_sync="dense")
    strategy = plan.strategy
    item = next(i for i in doc["counterfactuals"]["items"] if i["name"] == EMBEDDING)
    assert item["chosen"] == "allreduce ring (densified)"

    # By hand: the embedding alone on a PS task on node 0's CPU, or its rows gathered, every other variable
    # still ring-allreduced.
    base = simulator.simulate(strategy).step_time
    on_ps = Strategy(strategy.replicas, {**strategy.sync, EMBEDDING: VarSync("ps", ps_tasks=(0,))},
                     ["node-0/CPU:0"], strategy.group_slots)
    gathered = _changed(strategy, {EMBEDDING: dataclasses.replace(strategy.sync[EMBEDDING], sparse_sync="gather")})
    by_hand = {"PS on node-0/CPU:0": simulator.simulate(on_ps).step_time - base,
               "allreduce ring (rows gathered)": simulator.simulate(gathered).step_time - base}
    best = min(by_hand, key=by_hand.get)
    assert item["alternative"] == best and item["leaves_collective_ops"] == (best.startswith("PS"))
    by_hand = by_hand[best]
    assert item["delta_seconds"] == pytest.approx(by_hand, abs=1e-12)
    assert item["delta_seconds"] < 0, "a 122 MiB dense allreduce over 25 Gb/s Ethernet loses to PS"
    assert f"would save {ms(-item['delta_seconds'])}" in item["sentence"]


def test_a_step_bound_by_a_one_core_node_s_cpu_says_so(mlp_graph):
    plan, doc, simulator = baseline_report(mlp_graph, "emu-10gbit:2", "greedy-ps")
    node, seconds = simulator.simulate(plan.strategy).cpu_bound
    assert doc["plan"]["step_time"] == pytest.approx(seconds)
    b = doc["bottleneck"]
    assert b["bound_by"] == "cpu" and b["sentence"].startswith(f"CPU-bound: the processes on node {node} ")
    assert ms(seconds) in b["sentence"]


@pytest.mark.parametrize("device, busy, how", [
    ("node-0/GPU:0", 3.835e-3 * (1 + 1e-12), "computing and applying updates"),  # its ops' seconds summed
    ("node-0/CPU:0", 3.835e-3 * 1.5, "its ops overlapping on its cores"),  # an executor's ops side by side
])
def test_a_device_busy_the_whole_step_overlaps_its_ops_only_beyond_rounding(device, busy, how):
    from autodist.report.bottleneck import bottleneck

    data = {"prediction": {"step_time": 3.835e-3, "compute_time": 3.2e-3, "link_busy": {},
                           "device_busy": {device: busy}},
            "strategy": {"replicas": [[device]]}, "tasks": [], "variables": []}
    b = bottleneck(data, (0.0, 0.6e-3), None, 0.0, True)
    assert b["bound_by"] == "compute" and f"({how})" in b["sentence"]
