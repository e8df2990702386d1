"""Options and output paths checked at the CLI's edge: one line, exit 2, nothing written.

The graph is the real captured MLP (conftest's ``mlp_graph``); the cluster
sizes are real presets.  Every refusal happens before any search runs.
"""

import contextlib
import os
import stat
import subprocess

import pytest

from autodist.cli import main, placement_main
from autodist.cli.options import MAX_SEARCH_DEVICES, WARN_DEVICES, check_search_size
from autodist.errors import InputError
from autodist.io import write_text_atomic
from autodist.resource_spec import load_cluster


def run_cli(entry, argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        entry(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.fixture
def graph_json(mlp_graph, tmp_path):
    path = tmp_path / "graph.json"
    mlp_graph.save(path)
    return path


def _commands(graph_json, tmp_path):
    """argv of every searching command, each writing (if it got that far) into tmp_path."""
    return {
        "plan": (main, ["plan", str(graph_json), "--preset", "dgx-h100:2", "-o", str(tmp_path / "plan.json")]),
        "report": (placement_main, ["report", str(graph_json), "--preset", "dgx-h100:2"]),
        "run": (main, ["run", str(graph_json), "--preset", "cpu-local:2", "-o", str(tmp_path / "plan.json")]),
    }


@pytest.mark.parametrize("command", ["plan", "report", "run"])
@pytest.mark.parametrize(
    "option, value, expected",
    [
        ("--budget", "nan", "argument --budget: must be a finite number of seconds from 0.001 to 86400, got 'nan'"),
        ("--budget", "inf", "argument --budget: must be a finite number"),
        ("--budget", "0", "argument --budget: must be a finite number"),
        ("--budget", "-1", "argument --budget: must be a finite number"),
        ("--budget", "ten", "argument --budget: must be a finite number"),
        ("--seed", "abc", "argument --seed: must be an integer from 0 to 4294967295, got 'abc'"),
        ("--seed", "-5", "argument --seed: must be an integer from 0 to 4294967295, got '-5'"),
        ("--seed", "1.5", "argument --seed: must be an integer"),
        ("--moves", "0", "argument --moves: must be an integer from 1 to 1000000000, got '0'"),
        ("--moves", "2.5", "argument --moves: must be an integer from 1"),
    ],
)
def test_bad_numbers_are_one_line_naming_the_option(command, option, value, expected, graph_json, tmp_path, capsys):
    entry, argv = _commands(graph_json, tmp_path)[command]
    code, out, err = run_cli(entry, [*argv, option, value], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert expected in err
    assert sorted(os.listdir(tmp_path)) == ["graph.json"]


@pytest.mark.parametrize("command", ["plan", "report", "run"])
def test_budget_and_moves_together_are_one_line(command, graph_json, tmp_path, capsys):
    entry, argv = _commands(graph_json, tmp_path)[command]
    code, out, err = run_cli(entry, [*argv, "--budget", "5", "--moves", "100"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "argument --moves: not allowed with argument --budget" in err
    assert sorted(os.listdir(tmp_path)) == ["graph.json"]


def test_a_huge_preset_is_refused_before_the_search(graph_json, tmp_path, capsys):
    code, out, err = run_cli(main, ["plan", str(graph_json), "--preset", "dgx-h100:100000",
                                    "-o", str(tmp_path / "plan.json")], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "'dgx-h100:100000' has 800,000 compute devices; autodist searches clusters of at most 65,536" in err
    assert sorted(os.listdir(tmp_path)) == ["graph.json"]


def test_a_large_cluster_gets_a_line_with_the_search_time(capsys):
    spec = load_cluster(preset=f"dgx-h100:{WARN_DEVICES // 8 + 1}")
    check_search_size(spec, 10.0)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "has 8,200 compute devices: the search takes about 0.3 min" in err
    check_search_size(load_cluster(preset="dgx-h100:4"), 10.0)
    assert capsys.readouterr().err == ""
    with pytest.raises(InputError, match="at most 65,536"):
        check_search_size(load_cluster(preset=f"dgx-h100:{MAX_SEARCH_DEVICES // 8 + 1}"), 10.0)


@contextlib.contextmanager
def read_only_folder(path):
    """``path`` as a read-only file system (a tmpfs mounted ro), which even root cannot write."""
    path.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(path)], capture_output=True)
    if done.returncode:
        pytest.skip(f"a read-only folder needs mounting a tmpfs, which needs root: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _bad_output(kind, tmp_path):
    if kind == "directory":
        (tmp_path / "out").mkdir()
        return str(tmp_path / "out"), "is a directory, expected a file name"
    if kind == "missing parent":
        return str(tmp_path / "no" / "such" / "out.json"), "folder"
    if kind == "name too long":
        return str(tmp_path / ("x" * 300 + ".json")), "file name is longer than 255 bytes"
    return None, "is not writable"


@pytest.mark.parametrize("kind", ["directory", "missing parent", "name too long", "read-only folder"])
@pytest.mark.parametrize("command", ["plan -o", "report --timeline", "capture -o"])
def test_bad_output_paths_are_one_line_and_nothing_is_written(command, kind, graph_json, tmp_path, capsys):
    name, option = command.split()
    with contextlib.ExitStack() as stack:
        path, expected = _bad_output(kind, tmp_path)
        if path is None:
            path = str(stack.enter_context(read_only_folder(tmp_path / "ro")) / "out.json")
        before = sorted(os.listdir(tmp_path))
        argv = {
            "plan": (main, ["plan", str(graph_json), "--preset", "dgx-h100:2", "-o", path]),
            "report": (placement_main, ["report", str(graph_json), "--preset", "dgx-h100:2", "--timeline", path]),
            "capture": (main, ["capture", str(graph_json), "-o", path]),
        }[name]
        code, out, err = run_cli(*argv, capsys)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert f"{path}: {option}: " in err and expected in err, err
        assert sorted(os.listdir(tmp_path)) == before
        if kind == "read-only folder":
            assert os.listdir(path.rpartition("/")[0]) == []


def test_a_script_that_never_trains_is_stopped_by_the_timeout(tmp_path, capsys):
    script = tmp_path / "hang.py"
    script.write_text("import time\nwhile True:\n    time.sleep(0.1)\n")
    code, out, err = run_cli(main, ["capture", str(script), "-o", str(tmp_path / "g.json"), "--timeout", "1"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{script}: script did not reach its training step within 1 s (stopped; give more time with --timeout)" in err
    assert sorted(os.listdir(tmp_path)) == ["hang.py"]


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "1e9"])
def test_bad_timeout_is_one_line(value, tmp_path, capsys):
    code, _, err = run_cli(main, ["capture", "x.py", "-o", str(tmp_path / "g.json"), "--timeout", value], capsys)
    assert code == 2 and err.count("\n") == 1 and "argument --timeout: must be a finite number of seconds" in err


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o002])
def test_output_files_follow_the_umask(umask, tmp_path):
    previous = os.umask(umask)
    try:
        write_text_atomic(tmp_path / "out.json", "{}\n")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(os.stat(tmp_path / "out.json").st_mode) == 0o666 & ~umask


def test_own_warnings_print_as_one_line_each_once_and_others_as_python_prints_them(capsys):
    """A cost-model warning (a string op priced at the fallback) reads as the command's own line,
    without Python's source line, once however often it is raised; another package's warning is not ours to print."""
    import warnings

    from autodist.cli import _one_line_warnings
    from cost_models import UnknownOpTypeWarning

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with _one_line_warnings("placement"):
            for _ in range(2):
                warnings.warn("2 ops of 1 unknown op types got the fallback cost: StringFormat", UnknownOpTypeWarning)
            warnings.warn("someone else's", DeprecationWarning)
    err = capsys.readouterr().err
    assert err.count("placement: warning: 2 ops of 1 unknown op types got the fallback cost: StringFormat\n") == 1
    assert "warnings.warn(" not in err
    assert "someone else's" not in err  # left to Python's own handling (here, pytest's record of warnings)
