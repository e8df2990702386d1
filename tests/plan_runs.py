"""Plans made from a fixed strategy, trained with `autodist run --plan` on benchmarks/models/run_small_mlp.py:
what the runtime tests of strategy choices share (tests/test_compression.py, test_micro_batches.py,
test_replica_count.py)."""

import json
import os
import subprocess
import sys

import numpy as np

from tests.test_run import BATCH, SCRIPT, STEPS


def save_plan(job, spec, strategy, path):
    """The plan of ``strategy`` for ``job`` on ``spec``, predicted by the real simulator, written to ``path``."""
    from autodist.plan import Plan
    from cost_models import CostModel
    from placement import simulate

    cost_model = CostModel.default()
    plan = Plan.from_strategy(job, spec, strategy, simulate(job, spec, strategy, cost_model), cost_model.id, 0)
    plan.save(str(path))
    return str(path)


def captured(script, folder, script_args=()):
    """``autodist capture`` of ``script`` in a fresh process (Keras' layer names, hence variable paths, are those
    of the script run on its own), loaded back."""
    from autodist.graph.item import GraphItem

    graph = os.path.join(folder, "graph.json")
    done = subprocess.run([sys.executable, "-m", "autodist", "capture", script, "-o", graph, "--", *script_args],
                          capture_output=True, text=True, timeout=300, cwd=folder)
    assert done.returncode == 0, done.stderr[-2000:]
    return GraphItem.load(graph)


def ring_plan(job, path):
    """Every trainable variable of ``job`` allreduced by ring in one bucket, a replica on each node of cpu-local:2."""
    from autodist.resource_spec import load_cluster
    from autodist.strategy import Strategy, VarSync

    sync = {v.name: VarSync("allreduce", algorithm="ring", bucket=0) for v in job.trainable_variables()}
    strategy = Strategy(replicas=[["local-0/CPU:0"], ["local-1/CPU:0"]], sync=sync, ps_devices=[])
    return save_plan(job, load_cluster(preset="cpu-local:2"), strategy, path)


def run_plan(plan_path, folder, *options, script_args=()):
    """``autodist run --plan`` of the example for STEPS steps of BATCH rows: (the finished process, the run's record,
    the trained weights); the last two are None when the run failed."""
    report, weights = os.path.join(folder, "report.json"), os.path.join(folder, "weights.npz")
    done = subprocess.run(
        [sys.executable, "-m", "autodist", "run", SCRIPT, "--plan", plan_path, "--report", report, *options, "--",
         "--steps", str(STEPS), "--batch-size", str(BATCH), "--save-weights", weights, *script_args],
        capture_output=True, text=True, timeout=400)
    if done.returncode:
        return done, None, None
    with open(report) as fh:
        return done, json.load(fh), dict(np.load(weights))
