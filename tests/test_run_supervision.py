"""`autodist run` leaves nothing behind, however it ends: SIGKILL, SIGTERM, a worker that cannot join.

The runs are real: the allreduce plan of tests/test_run.py (two replica
processes on TensorFlow's collective ops) trains benchmarks/models/run_small_mlp.py.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from launcher.supervision import main as watchdog_main
from tests.test_run import SCRIPT, _children, _gone, _port_free, _processes_naming, plans, small_job  # noqa: F401


def _start_cli(plan_path, tmp_path):
    """`autodist run` with its temporary folder under ``tmp_path``; returns once a replica serves."""
    env = dict(os.environ, TMPDIR=str(tmp_path))
    cli = subprocess.Popen([sys.executable, "-m", "autodist", "run", SCRIPT, "--plan", plan_path, "--",
                            "--steps", "1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    for line in cli.stdout:
        if "serving at" in line:
            break
    tasks = _children(cli.pid)
    clusters = [_cluster_of(pid) for pid in tasks]
    ports = {a for c in clusters if c for addresses in c.values() for a in addresses}
    return cli, tasks, ports


def _cluster_of(pid):
    """The --cluster argument of a task's command line."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().decode().split("\0")
    except OSError:
        return None
    return json.loads(argv[argv.index("--cluster") + 1]) if "--cluster" in argv else None


def _left_behind(tasks, ports, plan_path, tmp_path):
    """What is still there: live tasks, ports listened on, temporary folders."""
    return ([p for p in tasks if not _gone(p)] + _processes_naming(plan_path)
            + [a for a in ports if not _port_free(a)] + list(tmp_path.glob("autodist-run-*")))


@pytest.mark.slow
def test_sigkill_of_the_launcher_leaves_no_process_port_or_folder_within_10_s(plans, tmp_path):
    _, plan_path = plans["allreduce"]
    cli, tasks, ports = _start_cli(plan_path, tmp_path)
    assert len(tasks) == 3 and len(ports) == 2 and list(tmp_path.glob("autodist-run-*"))  # replicas, watchdog
    cli.kill()
    cli.wait()
    deadline = time.monotonic() + 10
    while _left_behind(tasks, ports, plan_path, tmp_path) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _left_behind(tasks, ports, plan_path, tmp_path)


@pytest.mark.slow
def test_sigterm_stops_every_task_and_exits_143(plans, tmp_path):
    _, plan_path = plans["allreduce"]
    cli, tasks, ports = _start_cli(plan_path, tmp_path)
    cli.send_signal(signal.SIGTERM)
    _, err = cli.communicate(timeout=30)
    assert cli.returncode == 143 and "terminated" in err and "Traceback" not in err
    assert not _left_behind(tasks, ports, plan_path, tmp_path)


def test_the_watchdog_cleans_up_only_when_the_launcher_did_not(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    folder = tmp_path / "autodist-run-x"
    folder.mkdir()
    (folder / "worker-0.log").write_text("log")
    watchdog_main([f"folder {folder}\n", f"group {sleeper.pid}\n", "done\n"])
    assert folder.exists() and sleeper.poll() is None
    watchdog_main([f"folder {folder}\n", f"group {sleeper.pid}\n"])  # the pipe closed without done
    assert sleeper.wait(10) == -signal.SIGKILL and not folder.exists()


def _worker(plan_path, cluster, job, index, *options):
    env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": job, "index": index}}))
    return subprocess.run([sys.executable, "-m", "autodist", "worker", "--plan", plan_path, *options, SCRIPT],
                          env=env, capture_output=True, text=True, timeout=120)


def test_a_tf_config_cluster_that_differs_from_the_plan_is_refused(plans):
    _, plan_path = plans["allreduce"]
    done = _worker(plan_path, {"worker": ["localhost:1", "localhost:2", "localhost:3"]}, "worker", 0)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "TF_CONFIG: the cluster has 3 worker tasks and the plan 2" in done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["allreduce", "ps"])
def test_a_worker_whose_peers_never_come_up_fails_within_its_timeout(plans, kind):
    from launcher.local import local_cluster
    from launcher.runtime.client import client_tasks

    plan, plan_path = plans[kind]
    cluster = local_cluster(plan)
    job, index = client_tasks(plan)[0]
    absent = [f"{j}:{i} ({a})" for j, addresses in sorted(cluster.items()) for i, a in enumerate(addresses)
              if (j, i) != (job, index)]
    start = time.monotonic()
    done = _worker(plan_path, cluster, job, index, "--join-timeout", "5")
    took = time.monotonic() - start
    assert done.returncode == -signal.SIGKILL and "Traceback" not in done.stderr, done.stderr[-2000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"autodist: error: TF_CONFIG: task {job}:{index} waited 5 s and ")
    assert all(peer in last for peer in absent) and "never came up" in last, last
    assert took < 60  # the timeout, plus starting TensorFlow
