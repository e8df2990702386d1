"""TensorFlow's C++ log lines, kept off the terminal unless asked for (``--verbose`` or ``AUTODIST_VERBOSE=1``).

TensorFlow 2.21 prints its start-up lines (``WARNING: All log messages
before absl::InitializeLog() is called are written to STDERR``, the oneDNN
notice) through absl before ``TF_CPP_MIN_LOG_LEVEL`` is read, in every
process that imports it.  So a command's standard error (file descriptor 2,
which the processes it starts inherit) goes through a pipe whose reader
drops absl's info and warning lines and passes everything else on, in
order; ``TF_CPP_MIN_LOG_LEVEL=2`` quiets the lines logged after start-up.
Errors (``E``-level lines) and Python's output are never dropped.  The
command's children are awaited before it exits (local tasks, replicas), so
their last lines pass too; a child left running past its command's exit
would lose its standard error.  A process that may be killed before it
exits (launcher.runtime.joining's watchdog) writes its last line to the
command's own standard error, named in
``launcher.runtime.joining.TERMINAL_STDERR_ENV``.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading

from launcher.runtime.joining import TERMINAL_STDERR_ENV

VERBOSE_ENV = "AUTODIST_VERBOSE"

# absl's prefix (severity, date, time, thread, file:line) of an info or warning line, and the lines TensorFlow
# prints around it at start-up.
_DROPPED = re.compile(r"^([IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [\w./-]+:\d+\] "
                      r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
                      r"|To enable the following instructions: )")


def is_tensorflow_log(line):
    """Whether ``line`` is one of TensorFlow's info or warning log lines."""
    return bool(_DROPPED.match(line))


def verbose():
    """Whether TensorFlow's log lines are shown (``AUTODIST_VERBOSE=1``)."""
    return os.environ.get(VERBOSE_ENV) == "1"


def quiet_tensorflow_logs():
    """From now on, this process's and its children's TensorFlow log lines are dropped from standard error
    (unless :func:`verbose`); undone at exit, after the last line is passed on."""
    if verbose() or getattr(quiet_tensorflow_logs, "active", False):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    terminal = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)

    def forward():
        with os.fdopen(read, "rb") as lines, os.fdopen(terminal, "wb", buffering=0) as out:
            for line in lines:
                if not is_tensorflow_log(line.decode(errors="replace")):
                    out.write(line)

    reader = threading.Thread(target=forward, name="tensorflow-log-filter", daemon=True)
    reader.start()

    def restore():
        sys.stderr.flush()
        os.dup2(os.dup(reader_terminal), 2)  # this process's last lines go straight out; the pipe closes
        reader.join(timeout=5)

    reader_terminal = os.dup(terminal)
    os.environ[TERMINAL_STDERR_ENV] = f"{os.getpid()}:{reader_terminal}"
    atexit.register(restore)
    quiet_tensorflow_logs.active = True
