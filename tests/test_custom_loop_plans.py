"""Plans for a custom training loop: the search keeps to the plans the runtime runs it with, and says why.

The job is the real capture of benchmarks/models/custom_loop.py (a plain
tf.function step over raw tf.Variables); searches and reports are the real ones.
"""

import json
import os

import jsonschema
import pytest

from autodist.cli import placement_main
from autodist.report import schema

from tests.conftest import ZOO

PRESET = "dgx-h100:2"


@pytest.fixture(scope="module")
def custom_loop_graph():
    from autodist.graph.capture import capture_script

    return capture_script(os.path.join(ZOO, "custom_loop.py"), ["--batch-size", "32"])


@pytest.fixture(scope="module")
def custom_loop_file(tmp_path_factory, custom_loop_graph):
    path = tmp_path_factory.mktemp("custom-loop") / "custom_loop.json"
    custom_loop_graph.save(path)
    return path


def test_the_job_says_why_it_runs_on_collectives_only(custom_loop_graph, mlp_graph):
    assert "custom training loop" in custom_loop_graph.job.why_collective_only()
    assert mlp_graph.job.why_collective_only() is None  # a step traced by capture_step: any plan


def test_plans_for_a_custom_loop_allreduce_everything_without_being_asked(custom_loop_graph):
    from autodist.api import make_plan

    plan = make_plan(custom_loop_graph, PRESET, seed=0, budget_s=0.3)
    assert plan.strategy.allreduces_everything()
    assert not plan.strategy.ps_devices


def test_report_leaves_ps_and_hybrid_plans_out_and_says_why(capsys, custom_loop_file):
    """No PS baseline, no greedy-PS speed-up and no PS counterfactual (which the runtime could not run), and the
    report says why."""
    argv = ["report", str(custom_loop_file), "--preset", PRESET, "--budget", "0.3"]
    with pytest.raises(SystemExit) as done:
        placement_main(argv + ["--format", "json"])
    out, err = capsys.readouterr()
    assert done.value.code == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, schema())
    assert doc["search"]["left_out"].startswith("PS and hybrid plans: a custom training loop")
    assert doc["plan"]["ps_tasks"] == 0
    assert doc["baselines"] and not any("ps" in b["name"] for b in doc["baselines"])
    # No greedy-PS speed-up and no PS counterfactual: the plan says why instead.
    assert doc["plan"]["ps_not_offered"].startswith("a custom training loop")
    assert doc["plan"]["speedup_over_greedy_ps"] is None
    assert doc["counterfactuals"]["items"]
    assert not any("PS" in (item["alternative"] or "") for item in doc["counterfactuals"]["items"])
    with pytest.raises(SystemExit) as done:
        placement_main(argv)
    text, err = capsys.readouterr()
    assert done.value.code == 0, err
    text = " ".join(text.split())
    assert "Left out: PS and hybrid plans: a custom training loop runs on collective ops only" in text
    assert "No plan with PS can run this job (a custom training loop" in text and "over greedy PS" not in text
    assert "(PS is not offered: a custom training loop" in text and "PS on " not in text
