"""Every training phase: a script with two ``model.fit`` calls (another model, another batch) runs on two replicas.

The plan is made for the first fit; before, the second stopped with "the
script's global batch is 32 samples and the plan was made for 16 ... plan
again (autodist run --replan)".  Now the second phase is captured where it
starts and planned for the same replicas (launcher/runtime/phases.py), with
one line saying so and how long it took.
"""

import os
import re
import subprocess
import sys

from tests.plan_runs import captured, ring_plan

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "two_fits.py")


def test_a_second_fit_is_planned_where_it_starts(tmp_path):
    plan = ring_plan(captured(SCRIPT, tmp_path), tmp_path / "plan.json")
    done = subprocess.run([sys.executable, "-m", "autodist", "run", SCRIPT, "--plan", plan],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if "a new training phase" in line]
    assert len(lines) == 1, done.stdout
    call = next(i for i, line in enumerate(open(SCRIPT), 1) if line.startswith("second.fit("))
    assert re.search(rf"at {re.escape(SCRIPT)}:{call} \(global batch 32, 4 trainable variables\): planned in [0-9.]+ s "
                     r"on the same 2 replicas", lines[0]), lines[0]
    assert done.stdout.count("second phase trained") == 1


def test_a_second_custom_loop_step_is_planned_where_it_is_first_called(tmp_path):
    script = os.path.join(os.path.dirname(SCRIPT), "two_steps.py")
    plan = ring_plan(captured(script, tmp_path), tmp_path / "plan.json")
    done = subprocess.run([sys.executable, "-m", "autodist", "run", script, "--plan", plan],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if "a new training phase" in line]
    assert len(lines) == 1 and "(global batch 32, 4 trainable variables)" in lines[0], done.stdout
    assert "second phase trained" in done.stdout
