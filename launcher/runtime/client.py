"""The tasks that run the user's script, with the plan applied.

Two ways, chosen by the plan (:func:`collective_mode`):

- Collectives: every replica is a process that runs the script and sums
  gradients with TensorFlow's collective ops (:mod:`launcher.runtime.worker`);
  a worker task with several replicas starts one process per replica.
- One client: the chief (or worker 0 when there is none) connects to every
  other task's server and runs one step graph with explicit devices
  (:mod:`launcher.runtime.fit`); plans with PS variables, or with a replica
  over several devices, run this way.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from autodist.errors import LaunchError
from launcher.runtime.collective import collective_mode, why_not_collective
from launcher.runtime.joining import JOIN_TIMEOUT_S, add_join_timeout, check_cluster, joining
from launcher.runtime.server import exit_status, task_cpu_devices
from launcher.supervision import die_with_launcher, launched_env


def client_tasks(plan):
    """(job, index) of every task that runs the training script."""
    if collective_mode(plan):
        return [("worker", i) for i in range(len(plan.tasks_of("worker")))]
    return [("chief", 0) if plan.tasks_of("chief") else ("worker", 0)]


def connect(cluster, job, index, cpus=1, join_timeout=JOIN_TIMEOUT_S):
    """Make this process task ``job:index`` of ``cluster`` (with ``cpus`` CPU devices) and the client of the others.

    Returns once every other task has run an op, or exits after ``join_timeout``
    seconds naming the tasks that never came up.
    """
    import tensorflow as tf

    if cpus > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * cpus)
    with joining(cluster, (job, index), join_timeout):
        tf.config.experimental_connect_to_cluster(tf.train.ClusterSpec(cluster), job_name=job, task_index=index)
        for peer, addresses in cluster.items():
            for i in range(len(addresses)):
                if (peer, i) != (job, index):
                    with tf.device(f"/job:{peer}/replica:0/task:{i}/device:CPU:0"):
                        tf.identity(0).numpy()


# The seed every replica gives Python's, NumPy's, TensorFlow's and Keras' random generators before the script runs
# (this variable, else 0), so that what a script leaves unseeded (model.fit's default shuffle=True, a tf.data
# shuffle, random data) draws the same in every replica and the replicas build one global batch.
SEED_ENV = "AUTODIST_SEED"


def seed_replica(offset=0):
    """Seed every random generator alike in this replica (see :data:`SEED_ENV`), plus ``offset`` (a replica's rank
    where every replica runs its own batch: its data differs from the others'); returns the seed."""
    import keras

    seed = int(os.environ.get(SEED_ENV, "0")) + offset
    keras.utils.set_random_seed(seed)
    return seed


def run_script(script, args=()):
    """Run ``script`` as ``__main__`` with ``args``, as ``python script args`` would."""
    from autodist import hooks

    if not os.path.isfile(script):
        raise LaunchError("no such training script", source=script)
    hooks.run_script(script, args)


def run_single_client(plan, plan_path, cluster, job, index, script, args=(), report_path=None,
                      join_timeout=JOIN_TIMEOUT_S):
    """Connect, then run the script with ``model.fit`` routed through the plan (each kind of training loop's
    single-client side, :mod:`launcher.runtime.loops`)."""
    from launcher.runtime.layout import RunLayout
    from launcher.runtime.loops import OneClient, one_client

    layout = RunLayout.from_plan(plan)
    connect(cluster, job, index, task_cpu_devices(plan, job, index), join_timeout)
    with one_client(OneClient(layout, plan_path, report_path, why_not_collective(plan))) as sides:
        run_script(script, args)
    if not sides["fit"].fits:
        raise LaunchError("the script ended without calling model.fit, so nothing ran with the plan", source=script)


def run_replica(plan, plan_path, cluster, rank, script, args=(), report_path=None, join_timeout=JOIN_TIMEOUT_S):
    """Join the replicas' collective group as replica ``rank``, then run the script as that replica."""
    from launcher.runtime.collective import CollectiveGroup, join
    from launcher.runtime.layout import RunLayout
    from launcher.runtime.worker import CollectiveRun

    group = CollectiveGroup(RunLayout.from_plan(plan), rank)
    with joining(cluster, ("worker", rank), join_timeout):
        join(cluster, rank, group.device_type)
        group.barrier()
    print(f"autodist: replica {rank} of {group.size} serving at {cluster['worker'][rank]}", flush=True)
    seed_replica(rank if group.layout.per_replica else 0)
    with CollectiveRun(group, plan_path, script=script) as run:
        run_script(script, args)
    run.finish(report_path)


def run_task_replicas(plan, plan_path, cluster, ranks, script, args=(), report_path=None,
                      join_timeout=JOIN_TIMEOUT_S):
    """A worker task with several replicas: one process per replica (each sees only its GPU), all awaited.

    The task's first replica runs in the task's folder, every other in a folder
    of its own (:mod:`autodist.workdir`).  The first to fail stops the others
    and the task, naming the replica.
    """
    import subprocess
    import tempfile
    import time

    from autodist.workdir import own_folder
    from launcher.runtime.collective import replica_places
    from launcher.runtime.worker import merge_records

    places = replica_places(plan)
    gpus = plan.resource_spec.device(plan.strategy.replicas[ranks[0]][0]).kind == "GPU"
    with tempfile.TemporaryDirectory(prefix="autodist-replicas-") as folder:
        reports = [os.path.join(folder, f"replica-{r}.json") for r in ranks]
        processes = []
        try:
            for rank, report in zip(ranks, reports):
                env = launched_env(os.environ)
                if gpus:
                    env["CUDA_VISIBLE_DEVICES"] = str(places[rank][1])
                own = rank != ranks[0]
                argv = [sys.executable, "-m", "launcher.runtime.client", "--plan", os.path.abspath(plan_path),
                        "--cluster", json.dumps(cluster), "--replica", str(rank), "--report", report,
                        "--join-timeout", str(join_timeout), os.path.abspath(script) if own else script, *args]
                cwd = own_folder(folder, f"work-{rank}") if own else None
                processes.append(subprocess.Popen(argv, env=env, cwd=cwd))
            while True:
                codes = [p.poll() for p in processes]
                failed = [(r, c) for r, c in zip(ranks, codes) if c not in (None, 0)]
                if failed:
                    raise LaunchError(f"replica {failed[0][0]} failed with exit status {failed[0][1]}")
                if all(c == 0 for c in codes):
                    break
                time.sleep(0.1)
        finally:
            for p in processes:
                p.kill()
                p.wait()
        if report_path:
            merge_records(reports, report_path)


def run_client(plan_path, cluster, job, index, script, args=(), report_path=None, join_timeout=JOIN_TIMEOUT_S):
    """Run the script as task ``job:index`` of the plan (``cluster`` as in ``TF_CONFIG``), whichever way the plan runs.

    A cluster that differs from the plan's is refused; peers that do not
    come up within ``join_timeout`` seconds end the task with one line.
    """
    from autodist.plan import Plan
    from launcher.runtime.collective import replica_cluster, replica_places

    plan = Plan.load(plan_path)
    check_cluster(plan, cluster)
    if (job, index) not in client_tasks(plan):
        raise LaunchError(f"task {job}:{index} does not run the training script under this plan", field="TF_CONFIG")
    if not collective_mode(plan):
        run_single_client(plan, plan_path, cluster, job, index, script, args, report_path, join_timeout)
        return
    ranks = [r for r, (task, _) in enumerate(replica_places(plan)) if task == index]
    replicas = replica_cluster(plan, cluster)
    if len(ranks) == 1:
        run_replica(plan, plan_path, replicas, ranks[0], script, args, report_path, join_timeout)
    else:
        run_task_replicas(plan, plan_path, replicas, ranks, script, args, report_path, join_timeout)


def main(argv=None):
    die_with_launcher()
    parser = argparse.ArgumentParser(prog="python -m launcher.runtime.client")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--cluster", required=True,
                        help="as JSON: the tasks' cluster (with --job, --index) or the replicas' (with --replica)")
    parser.add_argument("--job")
    parser.add_argument("--index", type=int)
    parser.add_argument("--replica", type=int, help="run this replica of a collective plan")
    parser.add_argument("--report")
    add_join_timeout(parser)
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    cluster = json.loads(opts.cluster)
    if opts.replica is not None:
        from autodist.plan import Plan

        return exit_status(lambda: run_replica(Plan.load(opts.plan), opts.plan, cluster, opts.replica, opts.script,
                                               opts.args, opts.report, opts.join_timeout))
    return exit_status(run_client, opts.plan, cluster, opts.job, opts.index, opts.script, opts.args, opts.report,
                       opts.join_timeout)


if __name__ == "__main__":
    sys.exit(main())
