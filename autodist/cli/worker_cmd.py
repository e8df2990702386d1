"""``autodist worker --plan plan.json [train.py [args]]``: one task of a plan, inside its pod.

Reads ``TF_CONFIG`` (or, for a rank started by ``mpirun``, the MPI
environment: see :mod:`launcher.runtime.mpi`).  The tasks that run the
training script (every worker under a collective plan; otherwise the chief,
or worker 0 when the plan has no chief) run it with the plan applied; every
other task serves until stopped.
"""

from __future__ import annotations

import argparse

from autodist.errors import LaunchError
from launcher.runtime.joining import add_join_timeout, check_cluster


def register(subparsers):
    p = subparsers.add_parser("worker", help="run this pod's task of a plan (reads TF_CONFIG)")
    p.add_argument("--plan", required=True, metavar="FILE", help="the plan the pods were made from")
    p.add_argument("--report", metavar="FILE", help="client task: write a JSON record of the run")
    add_join_timeout(p)
    p.add_argument("script", nargs="?", help="the training script (the client task runs it)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="the script's own arguments")
    p.set_defaults(func=run)


# Under restartPolicy ExitCode the training operator restarts a pod that exits
# with 128 or more and fails the job on any other code (launcher/tfjob.py).  A
# replica whose peer is gone cannot rejoin the ring alone: it exits with this
# code, so every replica restarts and the ring forms again.
RETRYABLE_EXIT_CODE = 200
# TensorFlow's errors for a task that went away: refused connection, aborted
# or timed-out collective, cancelled step.
LOST_PEER_ERRORS = ("UnavailableError", "AbortedError", "DeadlineExceededError", "CancelledError")


def lost_peer(exc):
    """Whether ``exc`` is TensorFlow's report of a lost peer task."""
    import sys

    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(exc, tuple(getattr(tf.errors, name) for name in LOST_PEER_ERRORS))


def run(args):
    """Run this pod's task; a lost peer ends it with :data:`RETRYABLE_EXIT_CODE`."""
    import sys

    from autodist.errors import first_line

    try:
        return run_task(args)
    except Exception as exc:
        if not lost_peer(exc):
            raise
        print(f"autodist worker: a peer task is gone ({first_line(exc)}); exit {RETRYABLE_EXIT_CODE} to restart "
              "the job whole", file=sys.stderr)
        return RETRYABLE_EXIT_CODE


def run_task(args):
    import os

    from autodist.plan import Plan
    from launcher.runtime.client import client_tasks, run_client
    from launcher.runtime.mpi import started_by_mpi
    from launcher.runtime.server import read_tf_config, serve, task_cpu_devices

    plan = Plan.load(args.plan)
    if "TF_CONFIG" not in os.environ and started_by_mpi(os.environ):
        return run_mpi_rank(plan, args)
    cluster, job, index = read_tf_config()
    check_cluster(plan, cluster)
    plan.task(job, index)
    if (job, index) not in client_tasks(plan):
        serve(cluster, job, index, cpus=task_cpu_devices(plan, job, index))
        return 0
    if not args.script:
        raise LaunchError(f"task {job}:{index} runs the training script: give it after --plan", field="script")
    run_client(args.plan, cluster, job, index, args.script, _script_args(args), args.report, args.join_timeout)
    return 0


def run_mpi_rank(plan, args):
    """A rank started by ``mpirun`` (MPIJob): one replica of a collective plan, placed by the MPI environment."""
    import os

    from launcher.runtime.client import run_replica
    from launcher.runtime.collective import why_not_collective
    from launcher.runtime.mpi import rank_and_cluster

    reason = why_not_collective(plan)
    if reason:
        raise LaunchError(f"an MPI rank runs one replica of a collective plan, and this plan is not one: {reason}",
                          source=args.plan)
    if not args.script:
        raise LaunchError("an MPI rank runs the training script: give it after --plan", field="script")
    rank, local, cluster = rank_and_cluster(os.environ)
    if plan.resource_spec.device(plan.strategy.replicas[rank][0]).kind == "GPU":
        os.environ["CUDA_VISIBLE_DEVICES"] = str(local)  # before TensorFlow starts: this rank's GPU only
    run_replica(plan, args.plan, cluster, rank, args.script, _script_args(args), args.report, args.join_timeout)
    return 0


def _script_args(args):
    return args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
