"""The search's wall-clock budget covers set-up and baselines, and says when they used all of it; the report
prices its counterfactuals with the search's own Problem."""

import json

import pytest

from autodist.cli import main, placement_main
from autodist.plan import Plan
from autodist.report import build_report
from autodist.report.pricing import Pricing
from autodist.resource_spec import load_cluster
from placement import optimize
from placement.search import _named_as_run, _starts


@pytest.fixture(scope="module")
def cost_model():
    from cost_models import CostModel

    return CostModel.default()


def cli(entry, argv, capsys):
    try:
        code = entry(argv)
    except SystemExit as exit_info:
        code = exit_info.code
    out, err = capsys.readouterr()
    return code, out, err


def test_a_budget_spent_by_the_baselines_stops_there_and_says_so(mlp_graph, cost_model):
    spec = load_cluster(preset="dgx-h100:2")
    result = optimize(mlp_graph, spec, cost_model, budget_s=0.001)
    assert result.stats["moves_tried"] == 0 and result.stats["evaluations"] == 0
    # the best baseline, its buckets named by the ring that collective ops run
    assert result.strategy == _named_as_run(_starts(result.candidates)[0], spec)
    assert "the search made no move" in result.stats["warning"] and "0.001 s budget" in result.stats["warning"]
    search = Plan.build(mlp_graph, spec, result, cost_model.id, 0).to_dict()["provenance"]["search"]
    assert search["moves_made"] == 0 and search["warning"] == result.stats["warning"]
    Plan.from_dict(json.loads(json.dumps(Plan.build(mlp_graph, spec, result, cost_model.id, 0).to_dict())))


def test_a_search_that_moved_has_no_warning(mlp_graph, cost_model):
    result = optimize(mlp_graph, load_cluster(preset="dgx-h100:2"), cost_model, moves=5)
    assert result.stats["moves_tried"] == 5 and "warning" not in result.stats
    plan = Plan.build(mlp_graph, load_cluster(preset="dgx-h100:2"), result, cost_model.id, 0)
    assert "warning" not in plan.provenance["search"]


def test_plan_and_report_print_the_warning(mlp_graph, tmp_path, capsys):
    graph = tmp_path / "graph.json"
    mlp_graph.save(graph)
    code, out, err = cli(main, ["plan", str(graph), "--preset", "dgx-h100:2", "--budget", "0.001",
                                "-o", str(tmp_path / "plan.json")], capsys)
    assert code == 0, err
    assert err.startswith("autodist: warning: the search made no move") and err.count("\n") == 1
    assert "warning" in Plan.load(tmp_path / "plan.json").provenance["search"]
    code, out, err = cli(placement_main, ["report", str(graph), "--preset", "dgx-h100:2", "--budget", "0.001",
                                          "--format", "json"], capsys)
    assert code == 0, err
    assert "the search made no move" in json.loads(out)["search"]["warning"]


def test_counterfactuals_reuse_the_search_problem(mlp_graph, cost_model):
    spec = load_cluster(preset="dgx-h100:2")
    result = optimize(mlp_graph, spec, cost_model, moves=20)
    reused = Pricing(mlp_graph, spec, cost_model, simulator=result.simulator)
    assert reused._problem is result.simulator.problem
    other_spec = load_cluster(preset="dgx-h100:2")
    assert Pricing(mlp_graph, other_spec, cost_model, simulator=result.simulator)._problem is not reused._problem
    plan = Plan.build(mlp_graph, spec, result, cost_model.id, 0)
    with_search = build_report(plan, mlp_graph, result, cost_model=cost_model)["counterfactuals"]
    fresh = build_report(plan, mlp_graph, cost_model=cost_model)["counterfactuals"]
    assert with_search == fresh and with_search["items"]
