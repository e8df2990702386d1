"""Run a plan on this machine: one process per task on free localhost ports, or on an emulated cluster.

Every task of the plan becomes a process with its own ``TF_CONFIG``: the
tasks that run the user's script (every worker under a collective plan; the
chief, or worker 0, otherwise: see :mod:`launcher.runtime.client`) and a
TensorFlow server for each other task.  The first client's output is shown;
every other task logs to a file.  Each process gets its
own process group and a log file in a temporary folder.  The first client
runs in the current folder and every other client in a folder of its own
that links the current folder's entries, as workers on their own disks
(:mod:`autodist.workdir`; with ``chief_in_place=False``, the first too).  Whatever happens
(the script ends, a task dies, Ctrl-C, SIGTERM), every process group is
stopped before :func:`run_local` returns, and the folder is removed; if the
launcher itself is killed, its tasks and folder go with it
(:mod:`launcher.supervision`).  A plan for an emulated cluster runs each
task on its node's namespace and cores (:mod:`launcher.emulation`), created
on entry and removed on exit with the rest.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass

from autodist.errors import LaunchError
from autodist.workdir import own_folder
from launcher.runtime.joining import JOIN_TIMEOUT_S
from launcher.runtime.server import task_cpu_devices
from launcher.supervision import Watchdog, launched_env

POLL_S = 0.1
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}
STOP_GRACE_S = 3.0
LOG_TAIL_LINES = 15
# TensorFlow's C++ INFO lines drown the task logs; warnings and errors stay.
TASK_ENV = {"TF_CPP_MIN_LOG_LEVEL": "1", "PYTHONUNBUFFERED": "1"}


class Terminated(Exception):
    """The launcher got SIGTERM; raised once every task is stopped (the CLI exits 143)."""


def free_ports(count):
    """``count`` distinct TCP ports that are free on localhost right now."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("localhost", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def last_lines(path, count=LOG_TAIL_LINES):
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return [line.rstrip("\n") for line in deque(fh, maxlen=count)]
    except OSError:
        return []


@dataclass
class TaskProcess:
    """One started task: its name (``worker:1``), process and log file."""

    name: str
    process: subprocess.Popen
    log_path: str

    def alive(self):
        return self.process.poll() is None

    def kill(self):
        """SIGKILL the task's process group (reaped by :meth:`stop`)."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self, grace_s=STOP_GRACE_S):
        """SIGTERM the task's process group, SIGKILL it after ``grace_s`` seconds (at once for 0), reap it."""
        if grace_s:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        self.process.wait()


def local_gpu_count():
    """GPUs the NVIDIA driver shows on this machine (0 without the driver)."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def check_runs_here(plan):
    """Raise LaunchError unless every task's devices exist on this machine."""
    spec = plan.resource_spec
    need = max(sum(spec.device(d).kind == "GPU" for d in t["devices"]) for t in plan.tasks)
    have = local_gpu_count()
    if need > have:
        raise LaunchError(
            f"a task of this plan needs {need} GPUs and this machine has {have}; "
            f"run it on its cluster ({spec.name or 'see the plan'}) with `autodist emit`",
            source=plan.where,
        )


def local_cluster(plan):
    """Job -> localhost addresses on free ports, one per task of the plan."""
    counts = {job: len(plan.tasks_of(job)) for job in ("chief", "worker", "ps")}
    ports = iter(free_ports(sum(counts.values())))
    return {job: [f"localhost:{next(ports)}" for _ in range(count)] for job, count in counts.items() if count}


class LocalRun:
    """The processes of one local run; use as a context manager (it always tears down)."""

    def __init__(self, plan, plan_path, script, args=(), report_path=None, out=None, join_timeout=JOIN_TIMEOUT_S,
                 quiet=False, chief_in_place=True, env=None):
        from launcher.runtime.client import client_tasks
        from launcher.runtime.collective import collective_mode, replica_places

        check_runs_here(plan)
        self.plan = plan
        self.plan_path = os.path.abspath(plan_path)
        self.script = script
        self.args = list(args)
        self.report_path = report_path
        self.out = out or sys.stdout
        self.join_timeout = join_timeout
        self.quiet = quiet
        self.chief_in_place = chief_in_place
        self.env = dict(env or {})
        self.network = None
        if plan.resource_spec.emulated:
            from launcher.emulation import EmulatedNetwork

            self.network = EmulatedNetwork(plan.resource_spec)
        if collective_mode(plan):
            # One process per replica, on a cluster of its own (no server tasks).
            places = replica_places(plan)
            self.node = {_replica_name(places, r): plan.task("worker", task)["node"]
                         for r, (task, _) in enumerate(places)}
            self.cluster = {"worker": self._addresses(list(self.node.values()))}
            self.clients = [(_replica_name(places, r), ["--replica", str(r)]) for r in range(len(places))]
        else:
            self.node = {f"{t['job']}:{t['index']}": t["node"] for t in plan.tasks}
            self.cluster = local_cluster(plan) if self.network is None else {
                job: self._addresses([t["node"] for t in plan.tasks_of(job)])
                for job in ("chief", "worker", "ps") if plan.tasks_of(job)}
            job, index = client_tasks(plan)[0]
            self.clients = [(f"{job}:{index}", ["--job", job, "--index", str(index)])]
        self.tasks = []
        self._logdir = None
        self._watchdog = None
        self._old_handlers = {}
        self._starting = False  # a task is being started: a stop signal waits until it is recorded
        self._stop_pending = None  # the stop signal that came while a task was starting

    def _addresses(self, nodes):
        """One ``host:port`` per task on ``nodes``: free localhost ports, or each node's own address."""
        if self.network is None:
            return [f"localhost:{port}" for port in free_ports(len(nodes))]
        return [self.network.address(node) for node in nodes]

    def __enter__(self):
        self._old_handlers = {sig: signal.signal(sig, self._on_stop_signal) for sig in STOP_SIGNALS}
        self._watchdog = Watchdog()
        self._logdir = tempfile.mkdtemp(prefix="autodist-run-")
        self._watchdog.folder(self._logdir)
        if self.network is not None:
            self.network.watchdog = self._watchdog
            try:
                self.network.create()
            except BaseException as exc:
                self.__exit__(type(exc), exc, exc.__traceback__)
                raise
        return self

    def __exit__(self, exc_type, *exc):
        # Stopped by Ctrl-C or SIGTERM: the tasks are aborted at once (TensorFlow catches SIGTERM in a collective
        # task and fails its step, whose traceback would reach the user's terminal).
        self.stop_all(0 if exc_type in (KeyboardInterrupt, Terminated) else STOP_GRACE_S)
        if self.network is not None:
            self.network.remove()
        shutil.rmtree(self._logdir, ignore_errors=True)
        self._watchdog.done()
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        return False

    def _on_stop_signal(self, signum, frame):
        """Ctrl-C or SIGTERM: stop the run, but not between starting a task and recording it."""
        if self._starting:
            self._stop_pending = signum
        else:
            _raise_for(signum)

    def _start(self, name, argv, env, log_to_file, cwd=None):
        """Start one task (in ``cwd``, default the current folder) and record it, so that teardown always finds it."""
        log_path = os.path.join(self._logdir, name.replace(":", "-").replace(" ", "-") + ".log")
        if self.network is not None:
            argv = self.network.command(self.node[name], argv)
        self._starting = True
        try:
            with open(log_path, "w") as log:
                stream = log if log_to_file else None
                process = subprocess.Popen(argv, env=launched_env(env), stdout=stream, cwd=cwd,
                                           stderr=subprocess.STDOUT if log_to_file else None,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
            task = TaskProcess(name, process, log_path)
            self.tasks.append(task)
            self._watchdog.group(process.pid)
        finally:
            self._starting = False
        if self._stop_pending:
            _raise_for(self._stop_pending)
        return task

    def _report_of(self, k):
        if not self.report_path or len(self.clients) == 1:
            return self.report_path
        return os.path.join(self._logdir, f"report-{k}.json")

    def start(self):
        """Start every server task, then the clients with the user's script; returns the client tasks."""
        # Temporary files of the tasks (and of the script) go in the run's folder, removed whatever happens.
        base = {**os.environ, **TASK_ENV, **self.env, "TMPDIR": self._logdir}
        names = {name for name, _ in self.clients}
        for job, addresses in self.cluster.items():
            for index in range(len(addresses)):
                if f"{job}:{index}" in names or len(self.clients) > 1:
                    continue
                env = dict(base, TF_CONFIG=json.dumps({"cluster": self.cluster, "task": {"type": job, "index": index}}))
                cpus = str(task_cpu_devices(self.plan, job, index))
                self._start(f"{job}:{index}", [sys.executable, "-m", "launcher.runtime.server", cpus], env, True)
        clients = []
        for k, (name, where) in enumerate(self.clients):
            argv = [sys.executable, "-m", "launcher.runtime.client", "--plan", self.plan_path,
                    "--cluster", json.dumps(self.cluster), "--join-timeout", str(self.join_timeout), *where]
            if self._report_of(k):
                argv += ["--report", os.path.abspath(self._report_of(k))]
            script, cwd = self.script, None
            if k > 0 or not self.chief_in_place:
                script = os.path.abspath(self.script)
                cwd = own_folder(self._logdir, "work-" + name.replace(":", "-").replace(" ", "-"))
            clients.append(self._start(name, argv + [script, *self.args], base, k > 0 or self.quiet, cwd))
        return clients

    def wait(self, clients):
        """Block until every client ends; a task that fails or dies first stops the run."""
        while True:
            for task in self.tasks:
                code = task.process.poll()
                if code is None or (code == 0 and task in clients):
                    continue
                if task is clients[0] and not self.quiet:
                    raise LaunchError(f"the training script failed (task {task.name} exit status {code})",
                                      source=self.script)
                tail = "\n  ".join(last_lines(task.log_path)) or "(no output)"
                raise LaunchError(f"task {task.name} (pid {task.process.pid}) died with exit status {code}; "
                                  f"its last log lines:\n  {tail}")
            if all(task.process.poll() == 0 for task in clients):
                if self.report_path and len(self.clients) > 1:
                    from launcher.runtime.worker import merge_records

                    merge_records([self._report_of(k) for k in range(len(self.clients))], self.report_path)
                if self.report_path and self.network is not None:
                    self._record_link_bytes()
                return
            time.sleep(POLL_S)

    def _record_link_bytes(self):
        """Add to the run's record the bytes each emulated node's link sent during the run (``link_bytes_sent``)."""
        from autodist.io import read_json, write_json_atomic

        record = read_json(self.report_path)
        record["link_bytes_sent"] = self.network.sent_bytes()
        write_json_atomic(self.report_path, record)

    def stop_all(self, grace_s=STOP_GRACE_S):
        if not grace_s:
            # Aborted: every task is killed, the first (whose output is the user's terminal) first, before any is
            # reaped, so that none outlives a peer long enough to print the traceback of its failed collective.
            for task in self.tasks:
                task.kill()
        for task in reversed(self.tasks):
            task.stop(grace_s)

    def pids(self):
        return [t.process.pid for t in self.tasks]


def _raise_for(signum):
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _replica_name(places, rank):
    """``worker:T`` for the only replica of worker task T, ``worker:T replica I`` when it has several."""
    task, local = places[rank]
    alone = sum(t == task for t, _ in places) == 1
    return f"worker:{task}" if alone else f"worker:{task} replica {local}"


def run_local(plan, plan_path, script, args=(), report_path=None, on_start=None, join_timeout=JOIN_TIMEOUT_S,
              quiet=False, chief_in_place=True, env=None):
    """Run ``script`` under ``plan`` on localhost; returns when training ended and every task is stopped.

    Parameters
    ----------
    plan : autodist.plan.Plan
    plan_path : str
        The saved plan the tasks read.
    script : str
        The user's training script; ``args`` are its arguments.
    report_path : str, optional
        JSON record of the run written by the client (devices, transfers, times).
    on_start : callable, optional
        Called with the :class:`LocalRun` once every process is started.
    join_timeout : float
        Seconds a client waits for the other tasks before it gives up.
    quiet : bool
        Log the first client to a file too, instead of showing its output.
    chief_in_place : bool
        Run the first client in the current folder (the others each run in a
        folder of their own, :mod:`autodist.workdir`); False: the first too.
    env : dict, optional
        Variables added to every task's environment.

    Raises
    ------
    LaunchError
        When the script fails or a task dies; the message names the task and
        ends with its last log lines.
    """
    with LocalRun(plan, plan_path, script, args, report_path, join_timeout=join_timeout, quiet=quiet,
                  chief_in_place=chief_in_place, env=env) as run:
        clients = run.start()
        if on_start is not None:
            on_start(run)
        run.wait(clients)
