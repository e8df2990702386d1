"""GraphItem JSON: lossless round trip, no TensorFlow to load, clear errors for bad files."""

import json
import os
import subprocess
import sys

import pytest

from autodist.errors import InputError
from autodist.graph.item import GraphItem


@pytest.mark.parametrize("fixture", ["mlp_graph", "embedding_graph"])
def test_round_trip_is_lossless(fixture, request, tmp_path):
    item = request.getfixturevalue(fixture)
    path = tmp_path / "graph.json"
    item.save(path)
    loaded = GraphItem.load(path)
    assert loaded == item
    assert loaded.to_dict() == item.to_dict()
    assert loaded.content_hash() == item.content_hash()
    loaded.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == path.read_bytes()


def test_loading_imports_no_tensorflow(mlp_graph, tmp_path):
    path = tmp_path / "graph.json"
    mlp_graph.save(path)
    code = (
        "import sys, autodist\n"
        "from autodist.graph.loaders import load_graph\n"
        "from autodist.graph.summary import summarize\n"
        f"item = load_graph({str(path)!r})\n"
        "summarize(item)\n"
        "print(len(item.ops), 'tensorflow' in sys.modules, 'keras' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == [str(len(mlp_graph.ops)), "False", "False"]


def test_content_hash_changes_with_content(mlp_graph):
    other = GraphItem.from_dict(mlp_graph.to_dict())
    assert other.content_hash() == mlp_graph.content_hash()
    next(iter(other.ops.values())).flops += 1
    assert other.content_hash() != mlp_graph.content_hash()


def test_unreadable_json_names_the_file(tmp_path):
    path = tmp_path / "graph.json"
    path.write_text('{"format": "autodist.graph_item", ')
    with pytest.raises(InputError, match="graph.json: not valid JSON"):
        GraphItem.load(path)


def test_wrong_version_and_fields_are_named(mlp_graph, tmp_path):
    data = mlp_graph.to_dict()
    data["version"] = 99
    with pytest.raises(InputError, match="version"):
        GraphItem.from_dict(data, where="g.json")
    data = json.loads(json.dumps(mlp_graph.to_dict()))
    data["variables"][0]["colour"] = "red"
    with pytest.raises(InputError, match=r"variables\[0\].*colour"):
        GraphItem.from_dict(data, where="g.json")


def test_saved_json_is_written_atomically(mlp_graph, tmp_path):
    mlp_graph.save(tmp_path / "graph.json")
    assert sorted(os.listdir(tmp_path)) == ["graph.json"]
