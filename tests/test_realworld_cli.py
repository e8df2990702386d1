"""First contact: which step was captured (file and line), and a forgotten ``--`` before the script's arguments."""

import os

import pytest

from autodist.cli import main

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def test_capture_says_which_line_of_the_script_was_captured(tmp_path, capsys):
    script = os.path.join(SCRIPTS, "canonical_custom_loop.py")
    with pytest.raises(SystemExit) as info:
        main(["capture", script, "-o", str(tmp_path / "g.json")])
    out = capsys.readouterr().out
    call = next(i for i, line in enumerate(open(script), 1) if line.strip().startswith("train_step(images_batch"))
    assert info.value.code == 0 and f"(the step at {script}:{call})" in out


@pytest.mark.parametrize("command", ["run", "bench"])
def test_script_arguments_without_the_separator_suggest_it(command, capsys):
    script = os.path.join(SCRIPTS, "nested_subclassed.py")
    with pytest.raises(SystemExit) as info:
        main([command, script, "--epochs", "3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1
    assert f"go after --: autodist {command} {script} -- --epochs 3" in err[0]
