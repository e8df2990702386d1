"""A task that cannot join its peers says so and exits, instead of waiting forever.

TensorFlow waits for the peers of a cluster without a limit: the collective
runtime for every replica to register, a remote op for its task's server.
So a client checks ``TF_CONFIG``'s cluster against the plan before it
starts, and joins under :func:`joining`: past the timeout one line names
the peers that do not answer, and the task ends (SIGKILL, status 137).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

from autodist.errors import LaunchError
from launcher.supervision import die_with_launcher, launched_env

# "<pid>:<fd>": process <pid>'s own standard error while the command filters its fd 2 (autodist.cli.tf_logs).
TERMINAL_STDERR_ENV = "AUTODIST_TERMINAL_STDERR"

JOIN_TIMEOUT_S = 300.0
PROBE_TIMEOUT_S = 0.5


def check_cluster(plan, cluster):
    """Raise LaunchError unless ``cluster`` (as in ``TF_CONFIG``) has exactly the plan's jobs and task counts."""
    for job in sorted(set(cluster) | {t["job"] for t in plan.tasks}):
        have, want = len(cluster.get(job, [])), len(plan.tasks_of(job))
        if have != want:
            raise LaunchError(f"the cluster has {have} {job} tasks and the plan {want} "
                              "(was the plan made for this job's cluster?)", field="TF_CONFIG")


def unreachable_peers(cluster, me):
    """``job:index (address)`` of every task but ``me`` whose address refuses a TCP connection."""
    out = []
    for job, addresses in sorted(cluster.items()):
        for index, address in enumerate(addresses):
            if (job, index) == me:
                continue
            host, port = address.rsplit(":", 1)
            try:
                with socket.create_connection((host, int(port)), timeout=PROBE_TIMEOUT_S):
                    pass
            except OSError:
                out.append(f"{job}:{index} ({address})")
    return out


@contextlib.contextmanager
def joining(cluster, me, seconds=JOIN_TIMEOUT_S):
    """Run the block (this task ``me`` joining ``cluster``) within ``seconds``, or end the process with one line.

    TensorFlow waits in C++ and may hold the interpreter's lock meanwhile,
    so no thread of this process could act: a helper process waits instead,
    and past ``seconds`` prints the line on this process's stderr and
    SIGKILLs it.  The block's end stops the helper.
    """
    helper = subprocess.Popen([sys.executable, "-m", "launcher.runtime.joining", f"{seconds:g}", f"{me[0]}:{me[1]}",
                               json.dumps(cluster)], env=launched_env(os.environ), stderr=terminal_stderr())
    try:
        yield
    finally:
        helper.kill()
        helper.wait()


def terminal_stderr():
    """This process's own standard error where the command filters its fd 2 through a pipe (autodist.cli.tf_logs),
    else None: the helper's line must not go through a pipe whose reader dies with this process."""
    pid, _, fd = os.environ.get(TERMINAL_STDERR_ENV, "").partition(":")
    return int(fd) if pid == str(os.getpid()) and fd.isdigit() else None


def give_up_message(cluster, me, seconds):
    """The line a task that could not join prints: which peers never came up."""
    missing = unreachable_peers(cluster, me)
    who = f"{', '.join(missing)} never came up" if missing else "the other tasks did not all join"
    return (f"autodist: error: TF_CONFIG: task {me[0]}:{me[1]} waited {seconds:g} s and {who}; "
            "start every task of the plan, with the cluster the plan was made for")


def positive_seconds(text):
    """argparse type of ``--join-timeout``."""
    value = float(text)
    if not value > 0:
        raise ValueError(text)
    return value


def add_join_timeout(parser):
    parser.add_argument("--join-timeout", type=positive_seconds, default=JOIN_TIMEOUT_S, metavar="SECONDS",
                        help=f"give up, with one line naming the tasks that never came up, when the plan's other "
                             f"tasks have not all come up within this time (default {JOIN_TIMEOUT_S:g})")


def main(argv=None):
    """``python -m launcher.runtime.joining SECONDS JOB:INDEX CLUSTER``: the helper of :func:`joining`."""
    seconds, me, cluster = argv or sys.argv[1:]
    die_with_launcher()
    time.sleep(float(seconds))
    job, index = me.split(":")
    print(give_up_message(json.loads(cluster), (job, int(index)), float(seconds)), file=sys.stderr, flush=True)
    os.kill(os.getppid(), signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
