"""The client task: connect to the plan's servers and run the user's script with the plan applied."""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys

from autodist.errors import AutoDistError, LaunchError


def client_task(plan):
    """(job, index) of the task that runs the training script: the chief, or worker 0 without one."""
    return ("chief", 0) if plan.tasks_of("chief") else ("worker", 0)


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


def run_chief(plan_path, cluster, job, index, script, args=(), report_path=None):
    """Connect, then run the script with ``model.fit`` routed through the plan."""
    from autodist.plan import Plan
    from launcher.runtime.fit import PlacedFit
    from launcher.runtime.layout import RunLayout

    layout = RunLayout.from_plan(Plan.load(plan_path))
    connect(cluster, job, index)
    with PlacedFit(layout, plan_path, report_path=report_path) as placed:
        run_script(script, args)
    if not placed.fits:
        raise LaunchError("the script ended without calling model.fit, so nothing ran with the plan "
                          "(custom training loops are not distributed by this runtime yet)", source=script)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m launcher.runtime.chief")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--cluster", required=True, help="cluster spec as JSON (job -> addresses)")
    parser.add_argument("--job", required=True)
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--report")
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    try:
        run_chief(opts.plan, json.loads(opts.cluster), opts.job, opts.index, opts.script, opts.args, opts.report)
    except AutoDistError as exc:
        print(f"autodist: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
