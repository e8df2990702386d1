"""Tasks die with their launcher, however it ends (even by SIGKILL).

Two guards, each enough alone for the processes:

- Every task process the local launcher starts asks the kernel for SIGKILL
  when its parent dies (``prctl(PR_SET_PDEATHSIG)``, Linux), first thing in
  its ``main``: :func:`die_with_launcher`.  The launcher names itself in
  ``AUTODIST_LAUNCHER_PID``; a task that finds another parent (its launcher
  died before it got there) exits at once.
- A watchdog process (``python -m launcher.supervision``), in a session of
  its own, reads the launcher's temporary folder, every task's process
  group and the network namespaces of an emulated cluster from a pipe.  When
  the pipe closes without ``done`` (the launcher died without tearing down),
  it SIGKILLs those groups, removes the folder and deletes the namespaces.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import sys

LAUNCHER_PID_ENV = "AUTODIST_LAUNCHER_PID"
PR_SET_PDEATHSIG = 1


def die_with_launcher(environ=None):
    """In a task process: get SIGKILL when the launcher named in the environment dies (no-op without one)."""
    environ = os.environ if environ is None else environ
    launcher = environ.get(LAUNCHER_PID_ENV)
    if not launcher or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != int(launcher):  # the launcher died before prctl: nothing would signal us
        os._exit(1)


def launched_env(environ):
    """``environ`` for a task started by this process: the task dies with it."""
    return dict(environ, **{LAUNCHER_PID_ENV: str(os.getpid())})


class Watchdog:
    """The launcher's side of the watchdog: tell it what to clean up, and say ``done`` after a clean teardown."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-m", "launcher.supervision"], stdin=subprocess.PIPE,
                                        text=True, start_new_session=True)

    def _send(self, line):
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:  # the watchdog was killed: the launcher tears down alone
            pass

    def folder(self, path):
        self._send(f"folder {path}")

    def group(self, pgid):
        self._send(f"group {pgid}")

    def namespace(self, name):
        self._send(f"netns {name}")

    def done(self):
        """Everything is torn down: the watchdog exits without touching anything."""
        self._send("done")
        try:
            self.process.stdin.close()
        except BrokenPipeError:
            pass
        self.process.wait()


def clean_up(folders, groups, namespaces=()):
    """SIGKILL every process group, remove every folder and delete every network namespace, ignoring what is gone."""
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)
    for name in namespaces:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, stdin=subprocess.DEVNULL)


def main(stream=None):
    """Read ``folder PATH`` / ``group PGID`` / ``netns NAME`` / ``done`` lines until the pipe closes; clean up unless ``done``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
    folders, groups, namespaces = [], [], []
    for line in stream or sys.stdin:
        kind, _, value = line.rstrip("\n").partition(" ")
        if kind == "done":
            return 0
        if kind == "folder":
            folders.append(value)
        elif kind == "group":
            groups.append(int(value))
        elif kind == "netns":
            namespaces.append(value)
    clean_up(folders, groups, namespaces)
    return 0


if __name__ == "__main__":
    sys.exit(main())
