"""Plans found by the real search (placement.optimize) for real graphs on the presets emit valid manifests."""

import pytest

from autodist.errors import LaunchError
from autodist.plan import Plan
from launcher.manifests import build_manifests
from launcher.tf_config import operator_cluster_spec
from tests.test_plan_fixtures import cluster, cost_model

PRESETS = ["dgx-h100:2", "p3.16xlarge:2", "g4dn.12xlarge:3", "p4d.24xlarge:2", "cpu-2s-25g:2"]


def searched_plan(graph_item, preset):
    from placement import optimize

    spec = cluster(preset)
    result = optimize(graph_item, spec, cost_model(), seed=0, budget_s=0.3)
    return Plan.build(graph_item, spec, result, cost_model().id, 0)


def check_plan_manifests(plan):
    from tests.test_manifest_rules import check_runnable

    objects = build_manifests(plan, "tfjob")
    check_runnable(objects)
    tfjob = objects[-1]
    replicas = {k.lower(): v["replicas"] for k, v in tfjob["spec"]["tfReplicaSpecs"].items()}
    assert replicas == {job: len(plan.tasks_of(job)) for job in ("chief", "worker", "ps") if plan.tasks_of(job)}
    for task in plan.tasks:
        assert plan.tf_config(task["job"], task["index"], namespace="default")["cluster"] == operator_cluster_spec(tfjob)
    gpu_counts = {sum(plan.resource_spec.device(d).kind == "GPU" for d in t["devices"]) for t in plan.tasks_of("worker")}
    if not plan.has_ps() and len(gpu_counts) > 1:
        # The replica count may leave nodes uneven; one MPIJob worker template cannot say so.
        with pytest.raises(LaunchError, match="different GPU counts"):
            build_manifests(plan, "mpijob")
    elif not plan.has_ps():
        objects = build_manifests(plan, "mpijob")
        check_runnable(objects)
        mpijob = objects[-1]
        assert mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] == len(plan.tasks_of("worker"))
    return tfjob


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("graph_fixture", ["mlp_graph", "embedding_graph"])
def test_searched_plans_emit_valid_manifests(request, graph_fixture, preset):
    graph_item = request.getfixturevalue(graph_fixture)
    plan = searched_plan(graph_item, preset)
    assert plan.prediction["step_time"] <= min(plan.prediction["baselines"].values()) * (1 + 1e-9)
    check_plan_manifests(plan)


@pytest.mark.slow
def test_resnet50_plan_on_rdma_cluster(resnet50_graph):
    plan = searched_plan(resnet50_graph, "dgx-h100:2")
    tfjob = check_plan_manifests(plan)
    assert plan.graph["trainable_variables"] == len(resnet50_graph.trainable_variables())
    assert tfjob["spec"]["runPolicy"]["schedulingPolicy"]["minAvailable"] == len(plan.tasks)
