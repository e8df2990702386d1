"""``autodist capture`` and ``autodist inspect``: outputs, and one-line errors with exit status 2."""

import json
import os
import subprocess
import sys

import pytest

from autodist.cli import main

from tests.conftest import ZOO


def _cli(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    out = capsys.readouterr()
    return info.value.code, out.out, out.err


def test_capture_script_then_inspect(tmp_path, capsys):
    out_path = tmp_path / "graph.json"
    code, out, _ = _cli(["capture", os.path.join(ZOO, "mlp.py"), "-o", str(out_path), "--", "--batch-size", "8"], capsys)
    assert code == 0 and "captured mlp" in out
    code, out, _ = _cli(["inspect", str(out_path), "--json"], capsys)
    summary = json.loads(out)
    assert code == 0
    assert summary["batch_size"] == 8 and summary["optimizer"] == "Adam"
    assert summary["parameters"] == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10
    assert summary["parameter_bytes"] == 4 * summary["parameters"]
    assert summary["ops"] == sum(summary["ops_by_phase"].values())
    assert summary["flops_per_step"] == sum(summary["flops_by_phase"].values()) > 0
    assert summary["largest_variables"][0]["shape"] == [784, 512]
    code, text, _ = _cli(["inspect", str(out_path)], capsys)
    assert code == 0 and "FLOPs/step" in text and "no sparse gradients" in text


def test_inspect_lists_sparse_variables(embedding_graph, tmp_path, capsys):
    path = tmp_path / "emb.json"
    embedding_graph.save(path)
    code, out, _ = _cli(["inspect", str(path)], capsys)
    assert code == 0
    assert "sparse update" in out and "<= 40 rows/step" in out


def _assert_one_line_error(code, out_path, err, *needles):
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("autodist: error: "), err
    for needle in needles:
        assert needle in lines[0]
    assert not os.path.exists(out_path)
    assert not [f for f in os.listdir(os.path.dirname(out_path)) if f.startswith(".tmp-")]


@pytest.mark.parametrize(
    "body, needles",
    [
        ("raise KeyError('no column price')\n", ["train.py:1", "KeyError", "no column price"]),
        ("print('no training here')\n", ["without training"]),
    ],
)
def test_capture_bad_scripts_exit_2_without_output(tmp_path, capsys, body, needles):
    script = tmp_path / "train.py"
    script.write_text(body)
    out_path = tmp_path / "out" / "graph.json"
    os.makedirs(out_path.parent)
    code, _, err = _cli(["capture", str(script), "-o", str(out_path)], capsys)
    _assert_one_line_error(code, out_path, err, *needles)


def test_capture_corrupt_graph_def_exits_2(tmp_path, capsys):
    bad = tmp_path / "model.pb"
    bad.write_bytes(b"\xff\xff\xff garbage")
    out_path = tmp_path / "graph.json"
    code, _, err = _cli(["capture", str(bad), "-o", str(out_path)], capsys)
    _assert_one_line_error(code, out_path, err, "model.pb", "not a valid GraphDef")


def test_inspect_unreadable_json_exits_2(tmp_path, capsys):
    bad = tmp_path / "graph.json"
    bad.write_text("{not json")
    code, out, err = _cli(["inspect", str(bad)], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [err.strip()] and "graph.json: not valid JSON" in err


def test_missing_script_in_a_fresh_process(tmp_path):
    """The real console entry point: one line on stderr, status 2, no traceback."""
    out_path = tmp_path / "graph.json"
    proc = subprocess.run(
        [sys.executable, "-m", "autodist", "capture", str(tmp_path / "absent.py"), "-o", str(out_path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"autodist: error: {tmp_path / 'absent.py'}: no such script"
    assert not out_path.exists()
