"""The CLI dispatcher: what every command shares."""

import subprocess
import sys


def test_closed_pipe_stops_quietly():
    """``autodist ... | head`` must not end in a BrokenPipeError traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "autodist", "cluster", "show", "--preset", "dgx-h100:256", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout.read(10).startswith(b"{")
    proc.stdout.close()  # the reader goes away, as `head` does
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_unknown_command_is_a_usage_error(capsys):
    import pytest

    from autodist.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["no-such-command"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
