"""Inputs of every shape: a functional model with named inputs (a dict) trained on a dataset of (features, label).

tests/scripts/dict_inputs.py is captured with nested input shapes
(``{'x': {'ids': [32, 4], 'numeric': [32, 3]}, 'y': [32, 1]}``), which the
graph.json checks refused, and re-priced at another batch, where
``autodist/graph/rebatch.py`` raised ``KeyError: 0``; then it is reported
and trained on two replicas, each on its slice of every input.
"""

import os
import subprocess
import sys

from tests.plan_runs import captured, ring_plan

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "dict_inputs.py")


def test_dict_inputs_are_captured_checked_and_rebatched(tmp_path):
    from autodist.graph.capture import capture_script
    from autodist.graph.item import GraphItem
    from autodist.graph.rebatch import at_batch

    item = capture_script(SCRIPT)
    assert item.job.input_shapes == {"x": {"ids": [32, 4], "numeric": [32, 3]}, "y": [32, 1]}
    item.save(tmp_path / "graph.json")
    loaded = GraphItem.load(tmp_path / "graph.json")
    assert at_batch(loaded, 64).job.input_shapes == {"x": {"ids": [64, 4], "numeric": [64, 3]}, "y": [64, 1]}


def test_dict_inputs_are_reported_and_trained_on_two_replicas(tmp_path):

    report = subprocess.run(["placement", "report", SCRIPT, "--preset", "cpu-local:2", "--moves", "100"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    plan = ring_plan(captured(SCRIPT, tmp_path), tmp_path / "plan.json")
    done = subprocess.run([sys.executable, "-m", "autodist", "run", SCRIPT, "--plan", plan],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "step 8" in done.stdout
