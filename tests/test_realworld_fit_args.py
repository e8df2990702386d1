"""Keras fit's validation arguments under a plan with parameter servers (one client runs every replica).

tests/scripts/fit_validation.py fits with ``validation_split``, then with
``validation_data`` and ``validation_freq``; the runtime refused each
("model.fit(validation_split=...) is not supported under autodist run").
Now every epoch (every ``validation_freq``-th) is validated by Keras' own
``evaluate`` on the weights the epoch trained, and the history holds
``val_`` entries as Keras' fit gives them, beside the compiled metrics of the training batches.
"""

import os
import subprocess
import sys

from tests.plan_runs import captured, save_plan

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "fit_validation.py")


def test_validation_arguments_run_under_a_ps_plan(tmp_path):
    from autodist.resource_spec import load_cluster
    from autodist.strategy import Strategy, VarSync

    job = captured(SCRIPT, tmp_path)
    sync = {v.name: VarSync("ps", ps_tasks=(0,)) for v in job.trainable_variables()}
    strategy = Strategy(replicas=[["local-0/CPU:0"], ["local-1/CPU:0"]], sync=sync, ps_devices=["local-0/CPU:0"])
    plan = save_plan(job, load_cluster(preset="cpu-local:2"), strategy, tmp_path / "plan.json")
    done = subprocess.run([sys.executable, "-m", "autodist", "run", SCRIPT, "--plan", plan],
                          capture_output=True, text=True, timeout=400, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "history ['loss', 'mae', 'val_loss', 'val_mae'] 2 1" in done.stdout
