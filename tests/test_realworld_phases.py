"""Every training phase: a script with two ``model.fit`` calls (another model, another batch) runs on two replicas.

The plan is made for the first fit; before, the second stopped with "the
script's global batch is 32 samples and the plan was made for 16 ... plan
again (autodist run --replan)".  Now the second phase is captured where it
starts and planned for the same replicas (launcher/runtime/phases.py), with
one line saying so and how long it took.  The runtime cannot price that plan (the launcher does not import the
simulator), so ``autodist run`` prices it when the run ends and prints one measured-against-predicted line per
phase; before, the run ended with one line, "(the last phase's plan is not priced)".
"""

import os
import re
import subprocess
import sys

from tests.plan_runs import captured, ring_plan

CLOSING = re.compile(r"autodist: phase (\d)(?: at (\S+))?: measured step time [0-9.]+ ms.* vs predicted ([0-9.]+) ms "
                     r"\([0-9.]+x the prediction\); plan (\S+)$")


def _phase_lines(stdout):
    """``[(phase, source, predicted ms, plan file)]`` of a run's closing lines; every phase priced."""
    assert "not priced" not in stdout, stdout
    closing = [line for line in stdout.splitlines() if "measured step time" in line]
    matched = [CLOSING.match(line) for line in closing]
    assert all(matched), closing
    return [(int(m[1]), m[2], float(m[3]), m[4]) for m in matched]


def _check_priced(stdout, folder, source):
    """Both phases of the run are priced: the first by its plan, the second by the plan autodist run priced and
    kept beside it (its prediction is the line's)."""
    from autodist.plan import Plan

    (one, _, first, plan), (two, at, second, kept) = _phase_lines(stdout)
    assert (one, two, at) == (1, 2, source)
    assert first > 0 and second > 0
    assert kept == str(folder / "plan.phase-2.json")
    priced = Plan.load(kept)
    assert f"{priced.prediction['step_time'] * 1e3:.2f}" == f"{second:.2f}"
    assert len(priced.strategy.replicas) == 2 and priced.graph["batch_size"] == 32

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
    _check_priced(done.stdout, tmp_path, f"{SCRIPT}:{call}")


def test_a_second_custom_loop_step_is_planned_where_it_is_first_called(tmp_path):
    script = os.path.join(os.path.dirname(SCRIPT), "two_steps.py")
    plan = ring_plan(captured(script, tmp_path), tmp_path / "plan.json")
    done = subprocess.run([sys.executable, "-m", "autodist", "run", script, "--plan", plan],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [line for line in done.stdout.splitlines() if "a new training phase" in line]
    assert len(lines) == 1 and "(global batch 32, 4 trainable variables)" in lines[0], done.stdout
    assert "second phase trained" in done.stdout
    call = next(i for i, line in enumerate(open(script), 1) if line.strip().startswith("regressor_step("))
    _check_priced(done.stdout, tmp_path, f"{script}:{call}")


def test_a_fit_of_another_model_is_a_phase_of_its_own_where_its_variables_share_their_names():
    """keras-io's knowledge distillation fits the distiller, then a clone of its student, whose layers keep the
    student's names (``keras.models.clone_model``): the clone's variables had names the distiller's layout holds, at
    the same batch, so its steps were counted as the distiller's and measured against the distiller's prediction."""
    import keras

    from launcher.runtime.layout import RunLayout, VariablePlacement
    from launcher.runtime.phases import needs_plan

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="out")])
    clone = keras.models.clone_model(model)
    assert [v.path for v in clone.trainable_variables] == [v.path for v in model.trainable_variables]
    cpu = "/job:localhost/replica:0/task:0/device:CPU:0"
    variables = {v.path: VariablePlacement(v.path, "allreduce", (cpu,)) for v in model.trainable_variables}
    layout = RunLayout((cpu,), ("n0",), variables, predicted_step_time=1e-3, batch_size=8)
    assert not needs_plan(layout, model, 8, model)  # the same model's fit again: the same phase
    assert needs_plan(layout, clone, 8, model)
    assert not needs_plan(layout, clone, 8, None)  # the run's first fit: the phase the plan was made for
    assert needs_plan(layout, model, 16, model)
