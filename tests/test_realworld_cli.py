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


def test_a_plan_on_fewer_nodes_than_the_cluster_says_why(tmp_path, capsys):
    from autodist.cli.run_cmd import replicas_sentence
    from autodist.plan import Plan

    graph, plan_path = str(tmp_path / "g.json"), str(tmp_path / "plan.json")
    for argv in (["capture", os.path.join(SCRIPTS, "canonical_custom_loop.py"), "-o", graph],
                 ["plan", graph, "--preset", "cpu-local:2", "--moves", "200", "-o", plan_path]):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 0
    plan = Plan.load(plan_path)
    assert len(plan.strategy.replicas) == 1  # this small step is predicted fastest on one node
    ring = plan.prediction["baselines"]["ring"]
    sentence = replicas_sentence(plan)
    assert sentence.startswith("the plan uses 1 replica on 1 of the cluster's 2 nodes")
    assert f"predicted at {ring * 1e3:.3f} ms per step" in sentence


def test_the_scripts_own_help_is_shown_and_said_to_be_its_own(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text("import argparse\nparser = argparse.ArgumentParser(description='trains a thing')\n"
                      "parser.add_argument('--epochs', type=int)\nparser.parse_args()\n")
    with pytest.raises(SystemExit) as info:
        main(["capture", str(script), "-o", str(tmp_path / "g.json"), "--", "--help"])
    out = capsys.readouterr()
    assert "trains a thing" in out.out and info.value.code == 2
    assert out.err.strip().endswith("the script showed its own help (above) and exited before training; "
                                    "nothing to capture")
