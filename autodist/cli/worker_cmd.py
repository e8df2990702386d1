"""``autodist worker --plan plan.json [train.py [args]]``: one task of a plan, inside its pod.

Reads ``TF_CONFIG``.  The tasks that run the training script (every worker
under a collective plan; otherwise the chief, or worker 0 when the plan has no
chief) run it with the plan applied; every other task serves until stopped.
"""

from __future__ import annotations

import argparse

from autodist.errors import LaunchError


def register(subparsers):
    p = subparsers.add_parser("worker", help="run this pod's task of a plan (reads TF_CONFIG)")
    p.add_argument("--plan", required=True, metavar="FILE", help="the plan the pods were made from")
    p.add_argument("--report", metavar="FILE", help="client task: write a JSON record of the run")
    p.add_argument("script", nargs="?", help="the training script (the client task runs it)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    p.set_defaults(func=run)


def run(args):
    from autodist.plan import Plan
    from launcher.runtime.client import client_tasks, run_client
    from launcher.runtime.server import read_tf_config, serve

    plan = Plan.load(args.plan)
    cluster, job, index = read_tf_config()
    plan.task(job, index)
    if (job, index) not in client_tasks(plan):
        serve(cluster, job, index)
        return 0
    if not args.script:
        raise LaunchError(f"task {job}:{index} runs the training script: give it after --plan", field="script")
    script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    run_client(args.plan, cluster, job, index, args.script, script_args, args.report)
    return 0
