"""Every search move changes only the fields it names (issue 44): no move rebuilds a VarSync and drops the wire
format or the sparse-gradient sync of the variables it touches."""

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autodist.resource_spec import load_cluster
from autodist.strategy import COMPRESSIONS
from placement import Problem, baselines
from placement.space import StrategySpace, copy_strategy

ANY_VARIABLE_FIELD = {"method", "ps_tasks", "axis", "algorithm", "bucket", "compression", "sparse_sync"}
# move -> the fields it may change: strategy fields, and per-variable VarSync fields
NAMED = {
    "flip": {"ps_devices"} | ANY_VARIABLE_FIELD,  # a variable to the other method: a new VarSync
    "shard": {"ps_tasks"},
    "partition": {"ps_tasks"},
    "algorithm": {"algorithm"},
    "bucket": {"bucket"},
    "split": {"bucket"},
    "merge": {"bucket", "algorithm"},
    "group": {"group_slots"},
    "compression": {"compression"},
    "sparse_sync": {"sparse_sync"},
    "micro_batches": {"micro_batches"},
    "replicas": {"replicas", "micro_batches", "algorithm"},  # an algorithm the new replicas cannot run: ring
    "ps_count": {"ps_devices", "ps_tasks"},
}


def changed(before, after):
    """The names of the strategy fields and VarSync fields that differ between ``before`` and ``after``."""
    out = {f for f in ("replicas", "ps_devices", "group_slots", "micro_batches")
           if getattr(before, f) != getattr(after, f)}
    for name, s in before.sync.items():
        t = after.sync[name]
        out |= {f for f in ANY_VARIABLE_FIELD if getattr(s, f) != getattr(t, f)}
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), model=st.sampled_from(["embedding", "mlp"]),
       start=st.sampled_from(["ring", "greedy-ps", "parallax", "greedy-op-placer"]))
def test_no_move_changes_a_field_it_does_not_name(mlp_graph, embedding_graph, seed, model, start):
    from cost_models import CostModel

    graph = {"mlp": mlp_graph, "embedding": embedding_graph}[model]
    problem = Problem(graph, load_cluster(preset="dgx-h100:2"), CostModel.default())
    rng = random.Random(seed)
    space = StrategySpace(problem, rng, compressions=COMPRESSIONS, allow_micro_batches=True)
    current = (baselines.greedy_op_placer(problem) if start == "greedy-op-placer"
               else baselines.named(start).build(problem))
    seen = set()
    for _ in range(60):  # a walk, so buckets carry wire formats and sparse syncs that later moves must keep
        after = copy_strategy(current)
        label = space.move(after)
        seen.add(label)
        assert changed(current, after) <= NAMED[label], label
        after.validate(graph, problem.resource_spec)
        current = after
    assert seen <= set(NAMED)
