"""TensorFlow's C++ start-up log lines are off a command's standard error unless --verbose (issue 47, first contact).

TensorFlow 2.21 prints them through absl before ``TF_CPP_MIN_LOG_LEVEL`` is read, so on the old main every
command showed ``WARNING: All log messages before absl::InitializeLog() ...`` and the oneDNN notice.
"""

import os
import subprocess
import sys

from autodist.cli.tf_logs import is_tensorflow_log

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "fit_default_shuffle.py")
STARTUP = ("WARNING: All log messages before absl::InitializeLog()", "oneDNN custom operations are on")


def test_only_tensorflows_info_and_warning_lines_are_dropped():
    assert is_tensorflow_log("I0000 00:00:1795728970.554444   12018 port.cc:153] oneDNN custom operations are on.")
    assert is_tensorflow_log("W0000 00:00:1795728970.55   7 grpc_server_lib.cc:12] a warning")
    assert is_tensorflow_log("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR")
    assert not is_tensorflow_log("E0000 00:00:1795728970.554444   12018 cuda.cc:1] an error")
    assert not is_tensorflow_log("autodist: error: train.py: no such training script")
    assert not is_tensorflow_log("Traceback (most recent call last):")


def _capture(tmp_path, *options):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", "AUTODIST_VERBOSE")}
    return subprocess.run([sys.executable, "-m", "autodist", "capture", SCRIPT, "-o", str(tmp_path / "g.json"),
                           *options, "--", str(tmp_path / "w")], capture_output=True, text=True, timeout=300,
                          env=env, cwd=tmp_path)


def test_a_command_shows_no_tensorflow_start_up_lines_unless_verbose(tmp_path):
    quiet = _capture(tmp_path)
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert not any(text in quiet.stderr for text in STARTUP), quiet.stderr[-2000:]
    assert "captured fit_default_shuffle" in quiet.stdout
    verbose = _capture(tmp_path, "--verbose")
    assert verbose.returncode == 0 and all(text in verbose.stderr for text in STARTUP)
