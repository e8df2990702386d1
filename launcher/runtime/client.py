"""The tasks that run the user's script, with the plan applied.

Two ways, chosen by the plan (:func:`collective_mode`):

- Collectives: every worker task is a client that runs the script on its own
  replica and sums gradients with TensorFlow's collective ops
  (:mod:`launcher.runtime.worker`).
- One client: the chief (or worker 0 when there is none) connects to every
  other task's server and runs one step graph with explicit devices
  (:mod:`launcher.runtime.fit`); plans with PS variables, and plans that give
  a worker task several replicas, run this way.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys

from autodist.errors import LaunchError
from launcher.runtime.collective import collective_mode, why_not_collective
from launcher.runtime.server import exit_status


def client_tasks(plan):
    """(job, index) of every task that runs the training script."""
    if collective_mode(plan):
        return [("worker", i) for i in range(len(plan.tasks_of("worker")))]
    return [("chief", 0) if plan.tasks_of("chief") else ("worker", 0)]


def connect(cluster, job, index):
    """Make this process task ``job:index`` of ``cluster`` and the client of all the others."""
    import tensorflow as tf

    tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec(cluster), job_name=job, task_index=index)


def run_script(script, args=()):
    """Run ``script`` as ``__main__`` with ``args``, as ``python script args`` would."""
    if not os.path.isfile(script):
        raise LaunchError("no such training script", source=script)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        runpy.run_path(script, run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


class RefusedSteps:
    """``autodist.function`` steps under a one-client plan: refused, naming why (not trained undistributed)."""

    first = True

    def __init__(self, reason):
        self.reason = reason

    def call_step(self, step, args, kwargs):
        raise LaunchError(f"custom training loops (autodist.function) run only under plans that allreduce every "
                          f"variable, one replica per worker task, and this plan does not: {self.reason}; "
                          "train with model.fit, or make such a plan (autodist plan --allreduce-only)",
                          field="strategy.sync")


def run_single_client(plan, plan_path, cluster, job, index, script, args=(), report_path=None):
    """Connect, then run the script with ``model.fit`` routed through the plan."""
    from autodist.graph.script import steps_run_by
    from launcher.runtime.fit import PlacedFit
    from launcher.runtime.layout import RunLayout

    layout = RunLayout.from_plan(plan)
    connect(cluster, job, index)
    refused = RefusedSteps(why_not_collective(plan))
    with PlacedFit(layout, plan_path, report_path=report_path) as placed, steps_run_by(refused):
        run_script(script, args)
    if not placed.fits:
        raise LaunchError("the script ended without calling model.fit, so nothing ran with the plan", source=script)


def run_collective(plan, plan_path, cluster, index, script, args=(), report_path=None):
    """Join the collective group as worker ``index``, then run the script as that task's replica."""
    from launcher.runtime.collective import CollectiveGroup, join
    from launcher.runtime.layout import RunLayout
    from launcher.runtime.worker import CollectiveRun

    group = CollectiveGroup(RunLayout.from_plan(plan), index)
    join(cluster, index, group.device_type)
    print(f"autodist: task worker:{index} serving at {cluster['worker'][index]}, replica {group.rank} of {group.size}",
          flush=True)
    with CollectiveRun(group, plan_path) as run:
        run_script(script, args)
    run.finish(report_path)


def run_client(plan_path, cluster, job, index, script, args=(), report_path=None):
    """Run the script as task ``job:index`` of the plan, whichever way the plan runs."""
    from autodist.plan import Plan

    plan = Plan.load(plan_path)
    if (job, index) not in client_tasks(plan):
        raise LaunchError(f"task {job}:{index} does not run the training script under this plan", field="TF_CONFIG")
    if collective_mode(plan):
        run_collective(plan, plan_path, cluster, index, script, args, report_path)
    else:
        run_single_client(plan, plan_path, cluster, job, index, script, args, report_path)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m launcher.runtime.client")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--cluster", required=True, help="cluster spec as JSON (job -> addresses)")
    parser.add_argument("--job", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--report")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    return exit_status(run_client, opts.plan, json.loads(opts.cluster), opts.job, opts.index, opts.script, opts.args,
                       opts.report)


if __name__ == "__main__":
    sys.exit(main())
