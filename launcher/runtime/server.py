"""A plan's worker or PS task: a TensorFlow server that serves until it is stopped."""

from __future__ import annotations

import json
import os
import sys

from autodist.errors import AutoDistError, LaunchError
from launcher.supervision import die_with_launcher


def read_tf_config(environ=None):
    """``TF_CONFIG`` as (cluster dict, job, index); a LaunchError names what is wrong."""
    text = (environ if environ is not None else os.environ).get("TF_CONFIG")
    if not text:
        raise LaunchError("TF_CONFIG is not set", field="TF_CONFIG")
    try:
        config = json.loads(text)
        return config["cluster"], config["task"]["type"], int(config["task"]["index"])
    except (ValueError, KeyError, TypeError) as exc:
        raise LaunchError(f"malformed ({type(exc).__name__}: {exc})", field="TF_CONFIG") from None


def task_cpu_devices(plan, job, index):
    """How many CPU devices the plan gives task ``job:index`` (a node's CPU sockets, say); at least 1."""
    task = plan.task(job, index)
    return max(1, sum(plan.resource_spec.device(d).kind == "CPU" for d in task["devices"]))


def serve(cluster, job, index, cpus=1):
    """Start this task's gRPC server, with ``cpus`` CPU devices, and block until the process is stopped."""
    import tensorflow as tf

    if job not in cluster or not 0 <= index < len(cluster[job]):
        raise LaunchError(f"task {job}:{index} is not in the cluster", field="TF_CONFIG")
    config = tf.compat.v1.ConfigProto(device_count={"CPU": cpus})
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=job, task_index=index, protocol="grpc",
                                  config=config, start=True)
    print(f"autodist: task {job}:{index} serving at {cluster[job][index]}", flush=True)
    server.join()


def exit_status(run, *args):
    """Call ``run(*args)``: 0, or 2 with the error's one line on stderr when it raises an AutoDistError."""
    try:
        run(*args)
    except AutoDistError as exc:
        print(f"autodist: error: {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv=None):
    """``python -m launcher.runtime.server [CPU_DEVICES]``: serve the task ``TF_CONFIG`` names."""
    die_with_launcher()
    argv = sys.argv[1:] if argv is None else argv
    return exit_status(lambda: serve(*read_tf_config(), cpus=int(argv[0]) if argv else 1))


if __name__ == "__main__":
    sys.exit(main())
