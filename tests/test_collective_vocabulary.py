"""One vocabulary: what makes one collective (autodist.strategy.CollectiveKey) is read the same way by the
simulator's step graph, the plan, the report's pricing and the runtime's layout."""

import pytest

from autodist.plan import Plan
from autodist.report.pricing import Pricing
from autodist.resource_spec import load_cluster
from autodist.strategy import CollectiveKey, Strategy, VarSync
from launcher.runtime.layout import RunLayout
from placement import Problem, Simulator


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


def _mixed(graph_item, spec):
    """Bucket 0 holds variables of two algorithms and two wire formats: three collectives, not one."""
    names = sorted(v.name for v in graph_item.trainable_variables())
    options = [("ring", "none"), ("hierarchical", "none"), ("ring", "fp16")]
    sync = {name: VarSync("allreduce", algorithm=options[i % 3][0], bucket=0, compression=options[i % 3][1])
            for i, name in enumerate(names)}
    return Strategy(replicas=[[d.name] for d in spec.gpus()], sync=sync)


def test_every_reader_groups_the_variables_of_one_bucket_by_its_collective_key(mlp_graph, cost_model):
    spec = load_cluster(preset="dgx-h100:2")
    strategy = _mixed(mlp_graph, spec)
    expected = strategy.collectives()
    assert len(expected) == 3 and {k.bucket for k in expected} == {0}
    assert list(expected) == sorted(expected)  # issue order

    sim = Simulator(Problem(mlp_graph, spec, cost_model))
    graph = sim.lower(strategy)
    assert [(c.key, list(c.variables)) for c in graph.collectives] == list(expected.items())
    assert len([line for line in graph.lines() if line.startswith("allreduce")]) == 3

    plan = Plan.from_strategy(mlp_graph, spec, strategy, sim.simulate(strategy), "cm", 0)
    listed = {CollectiveKey(b["bucket"], 0, b.get("compression", "none"), b["algorithm"]): b["variables"]
              for b in plan.collectives["buckets"]}
    assert listed == expected
    Plan.from_dict(plan.to_dict())  # its checks (autodist.plan_checks) accept the three collectives

    pricing = Pricing(mlp_graph, spec, cost_model, simulator=sim)
    assert pricing.buckets(strategy) == expected

    layout = RunLayout.from_plan(plan)
    assert [(b, algorithm, sorted(names)) for b, algorithm, names in layout.buckets()] == [
        (k.bucket, k.algorithm, names) for k, names in expected.items()]


def test_allreduced_variables_of_units_on_a_later_slot_are_summed_where_the_runtime_holds_them(mlp_graph,
                                                                                                 cost_model):
    """Replicas over two devices, some op groups on the second: the runtime keeps every allreduced variable on its
    replica's first device and sums it there (launcher.runtime.layout, .trainer), so the simulator prices each
    collective over the replicas' first devices, whatever slot the variable's unit runs on."""
    from placement.grouping import group_ops

    spec = load_cluster(preset="dgx-h100:2")
    gpus = [d.name for d in spec.gpus()]
    replicas = [gpus[i:i + 2] for i in range(0, 8, 2)]
    units = group_ops(mlp_graph).units
    strategy = Strategy(replicas=replicas, sync={v.name: VarSync("allreduce", bucket=0)
                                                 for v in mlp_graph.trainable_variables()},
                        group_slots={unit: 1 for unit in units[len(units) // 2:]})
    sim = Simulator(Problem(mlp_graph, spec, cost_model))
    graph = sim.lower(strategy)
    assert [c.key.slot for c in graph.collectives] == [0]
    assert graph.collectives[0].devices == tuple(r[0] for r in replicas)
    plan = Plan.from_strategy(mlp_graph, spec, strategy, sim.simulate(strategy), "cm", 0)
    layout = RunLayout.from_plan(plan)
    assert [plan.device_string(r[0], job="worker") for r in replicas] == list(layout.replica_devices)
    assert list(Pricing(mlp_graph, spec, cost_model, simulator=sim).buckets(strategy)) == [c.key for c in graph.collectives]


def test_allreduced_variables_of_units_on_a_later_slot_are_held_on_the_replicas_first_device(mlp_graph, cost_model):
    """Memory as the runtime holds it: every allreduced variable (with its optimizer slots) on its replica's first
    device, whatever slot its unit computes on: with every unit on the second device, the variables stay on the
    first."""
    from placement.grouping import group_ops

    spec = load_cluster(preset="dgx-h100:1")
    gpus = [d.name for d in spec.gpus()]
    replicas = [gpus[i:i + 2] for i in range(0, 8, 2)]
    sync = {v.name: VarSync("allreduce", bucket=0) for v in mlp_graph.trainable_variables()}
    units = group_ops(mlp_graph).units
    sim = Simulator(Problem(mlp_graph, spec, cost_model))
    strategy = Strategy(replicas=replicas, sync=sync, group_slots={u: 1 for u in units})
    memory = sim.simulate(strategy).memory
    share = sim.problem.at_replicas(len(replicas), sim.problem.micro_batches_of(strategy))  # one replica's batch
    variables = sum(share.dense_bytes[name] + share.slot_bytes[name] for name in sync)
    slots = tuple(1 for _ in share.groups.units)
    (live_first, reserve), (live_second, _) = (share.slot_peak(slots, slot) for slot in (0, 1))
    assert memory[replicas[0][0]] == reserve + live_first + variables
    assert memory[replicas[0][1]] == reserve + live_second
