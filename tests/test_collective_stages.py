"""Each allreduce algorithm's stages on collective ops (autodist.collective_stages): groups on 1, 2 and 3 nodes,
even and uneven, and the one table of algorithms that the strategy, the pricers and the runtime share."""

import pytest

from autodist.collective_stages import BUILDERS, STAGE_OPS, Stage, distinct_algorithms, group_keys, stages
from autodist.errors import PlacementError


def _members(stage):
    return sorted(r for g in stage.groups for r in g)


def test_two_nodes_of_two_replicas():
    nodes = ["a", "a", "b", "b"]
    assert stages("ring", nodes) == (Stage("allreduce", ((0, 1, 2, 3),)),)
    assert stages("hierarchical", nodes) == (
        Stage("reduce_scatter", ((0, 1), (2, 3)), 2),
        Stage("allreduce", ((0, 2), (1, 3)), 2),  # one group per local rank: the same shard on every node
        Stage("all_gather", ((0, 1), (2, 3)), 2))
    assert stages("master", nodes) == (
        Stage("allreduce", ((0, 1), (2, 3))),
        Stage("allreduce", ((0, 2),)),  # the masters: each node's first replica
        Stage("broadcast", ((0, 1), (2, 3))))
    assert distinct_algorithms(nodes) == (("ring", "hierarchical", "master"), {})


def test_three_nodes_interleaved_keep_each_nodes_replicas_together():
    nodes = ["a", "b", "c", "a", "b", "c"]
    scatter, across, gather = stages("hierarchical", nodes)
    assert scatter.groups == gather.groups == ((0, 3), (1, 4), (2, 5)) and scatter.shards == 2
    assert across.groups == ((0, 1, 2), (3, 4, 5))
    inside, masters, bcast = stages("master", nodes)
    assert masters.groups == ((0, 1, 2),) and bcast.groups == ((0, 3), (1, 4), (2, 5))


@pytest.mark.parametrize("nodes", [["a"] * 4, ["a", "b", "c"], ["a"]])
def test_where_no_algorithm_differs_every_one_is_the_ring(nodes):
    ring = stages("ring", nodes)
    for algorithm in BUILDERS:
        assert stages(algorithm, nodes) == ring
    algorithms, left_out = distinct_algorithms(nodes)
    assert algorithms == ("ring",) and set(left_out) == {"hierarchical", "master"}
    assert all("same as ring" in why for why in left_out.values())


def test_uneven_nodes_refuse_hierarchical_and_run_master():
    nodes = ["a", "a", "a", "b", "b", "c"]
    with pytest.raises(PlacementError, match="as many replicas on every node, got 3, 2, 1"):
        stages("hierarchical", nodes)
    inside, masters, bcast = stages("master", nodes)
    assert inside.groups == ((0, 1, 2), (3, 4)) and masters.groups == ((0, 3, 5),)
    assert bcast.groups == ((0, 1, 2), (3, 4))
    algorithms, left_out = distinct_algorithms(nodes)
    assert algorithms == ("ring", "master") and "as many replicas" in left_out["hierarchical"]


def test_every_replica_ends_each_algorithm_in_exactly_its_groups():
    """Every replica is in one group of every stage but the masters' (where only masters are)."""
    nodes = ["a", "a", "a", "b", "b", "b"]
    for algorithm in BUILDERS:
        for stage in stages(algorithm, nodes):
            assert stage.op in STAGE_OPS
            members = _members(stage)
            assert len(members) == len(set(members))
            if not (algorithm == "master" and stage.groups == ((0, 3),)):
                assert members == list(range(6)), (algorithm, stage)


def test_groups_are_ranked_as_tensorflow_ranks_tasks():
    """TensorFlow ranks a group's tasks by name: task:10 before task:2; a reduce-scatter's shard k is the k-th's."""
    nodes = ["a"] * 11 + ["b"] * 11
    scatter, across, _ = stages("hierarchical", nodes)
    assert scatter.groups[0][:3] == (0, 1, 10) and scatter.groups[1][:3] == (11, 12, 13)
    # shard k of node a (its k-th member by rank) meets shard k of node b
    for k, group in enumerate(across.groups):
        assert group == tuple(sorted((scatter.groups[0][k], scatter.groups[1][k]), key=lambda r: f"task:{r}"))


def test_group_keys_are_distinct_and_the_same_for_every_replica():
    nodes = ["a", "a", "b", "b"]
    keys = group_keys(nodes)
    assert sorted(keys) == [(0, 1), (0, 2), (1, 3), (2, 3)]
    assert sorted(keys.values()) == [3, 4, 5, 6] and group_keys(list(nodes)) == keys
    assert group_keys(["a", "b"]) == {}  # only the group of everyone, which has its own key


def test_one_table_of_algorithms_for_the_strategy_the_pricers_and_the_runtime():
    """A newcomer adding an allreduce algorithm touches the strategy's list, the stage builders (which the runtime
    issues), one pricer, and the runtime's stage ops; this fails if any of them misses it."""
    from autodist.strategy import ALLREDUCE_ALGORITHMS
    from cost_models.comm.collectives import PRICERS, STAGE_PRICERS
    from launcher.runtime.collective import CollectiveGroup

    from autodist.cli.bench_cmd import STRATEGIES

    assert set(ALLREDUCE_ALGORITHMS) == set(BUILDERS) == set(PRICERS)
    assert set(ALLREDUCE_ALGORITHMS) <= set(STRATEGIES)  # autodist bench runs data parallelism by each
    assert set(STAGE_OPS) == set(STAGE_PRICERS)
    assert all(callable(getattr(CollectiveGroup, f"_{op}", None)) for op in STAGE_OPS)


def test_the_runtime_refuses_a_hierarchical_plan_on_uneven_nodes_in_one_line():
    from autodist.errors import LaunchError
    from launcher.runtime.collective import CollectiveGroup
    from launcher.runtime.layout import RunLayout, VariablePlacement

    def layout(algorithm):
        devices = tuple(f"/job:worker/replica:0/task:{i}/device:CPU:0" for i in range(3))
        return RunLayout(replica_devices=devices, replica_nodes=("a", "a", "b"), predicted_step_time=0.0,
                         variables={"w": VariablePlacement("w", "allreduce", devices, algorithm=algorithm)})

    with pytest.raises(LaunchError, match="hierarchical allreduce needs as many replicas on every node, got 2, 1"):
        CollectiveGroup(layout("hierarchical"), 0)
    group = CollectiveGroup(layout("master"), 2)
    assert group.stages["master"] == stages("master", ["a", "a", "b"])
    assert group.sub_groups == group_keys(["a", "a", "b"])
