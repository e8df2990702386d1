"""Bad cluster input through the real CLI: exit status 2, one line naming file and field."""

import json
import textwrap

import pytest

from autodist.cli import main

GOOD_NODE = "{name: a, gpus: {model: T4}, fabric: pcie-gen3, nics: [eth-25g]}"

BAD_FILES = {
    "unknown preset": (
        "nodes: [{name: a, preset: dgx-h10}]",
        "nodes[0].preset: unknown preset 'dgx-h10' (did you mean 'dgx-h100'?)",
    ),
    "unknown GPU model": (
        "nodes: [{name: a, gpus: {model: H100-SMX, count: 8}}]",
        "nodes[0].gpus.model: unknown device model 'H100-SMX' (did you mean 'H100-SXM'?)",
    ),
    "unknown node key": (
        "nodes: [{name: a, gpu: {model: T4}}]",
        "nodes[0]: unknown key 'gpu' (did you mean 'gpus'?)",
    ),
    "unknown NIC key": (
        f"nodes: [{GOOD_NODE}, {{name: b, gpus: {{model: T4}}, nics: [{{kind: roce, bandwdth: 10}}]}}]",
        "nodes[1].nics[0]: unknown key 'bandwdth' (did you mean 'bandwidth'?)",
    ),
    "unknown top-level key": ("nodez: []", "(top level): unknown key 'nodez' (did you mean 'nodes'?)"),
    "negative bandwidth": (
        f"nodes: [{GOOD_NODE}, {{name: b, gpus: {{model: T4}}, nics: [{{kind: ethernet, bandwidth: -1}}]}}]",
        "nodes[1].nics[0].bandwidth: must be positive, got -1",
    ),
    "zero fabric bandwidth": (
        "nodes: [{name: a, cpus: {model: cpu-local}, fabric: {kind: loopback, bandwidth: 0}}]",
        "nodes[0].fabric.bandwidth: must be positive, got 0",
    ),
    "zero speed with unit": (
        "nodes: [{name: a, cpus: {model: cpu-local}, nics: [{kind: ethernet, speed: 0 Gb/s}]}]",
        "nodes[0].nics[0].speed: must be positive, got '0 Gb/s'",
    ),
    "bad unit": (
        "nodes: [{name: a, cpus: {model: cpu-local}, nics: [{kind: ethernet, speed: 10 Gbit}]}]",
        "nodes[0].nics[0].speed: unknown unit 'Gbit'",
    ),
    "no devices": ("nodes: [{name: a, fabric: pcie-gen4}]", "nodes[0]: no devices: give gpus, cpus or a preset"),
    "no nodes": ("nodes: []", "nodes: expected a non-empty list of nodes"),
    "empty file": ("", "nodes: the file is empty"),
    "duplicate names": (
        f"nodes: [{GOOD_NODE}, {{name: b, count: 2, preset: g4dn.12xlarge}}, {GOOD_NODE}]",
        "nodes[2].name: duplicate node name 'a' (also nodes[0])",
    ),
    "duplicate names from a group": (
        "nodes: [{name: g-1, preset: g4dn.12xlarge}, {name: g, count: 2, preset: g4dn.12xlarge}]",
        "nodes[1].name: duplicate node name 'g-1' (also nodes[0])",
    ),
    "addresses of a group": (
        "nodes: [{name: a, count: 2, preset: dgx-h100, addresses: [10.0.0.1]}]",
        "nodes[0].addresses: expected a list of 2 addresses, got ['10.0.0.1']",
    ),
    "zero count": ("nodes: [{name: a, count: 0, preset: dgx-h100}]", "nodes[0].count: must be a positive integer"),
    "huge device count": (
        "nodes: [{name: a, gpus: {model: T4, count: 100000000}}]",
        "nodes[0].gpus.count: must be at most 1024, got 100000000",
    ),
    "malformed YAML": ("nodes: [{name: a, preset: dgx-h100\n", "malformed YAML"),
    "GPUDirect without RDMA": (
        "nodes: [{name: a, preset: dgx-h100, nics: [{kind: ethernet, speed: 100, gpudirect: true}]}]",
        "nodes[0].nics[0].gpudirect: GPUDirect RDMA needs rdma: true",
    ),
    "unknown link kind": (
        "nodes: [{name: a, preset: dgx-h100, fabric: {kind: nvlnk, bandwidth: 450}}]",
        "nodes[0].fabric.kind: unknown link kind 'nvlnk' (did you mean 'nvlink'?)",
    ),
    "no NIC with several nodes": (
        "nodes: [{name: a, count: 2, cpus: {model: cpu-local}}]",
        "nodes[0].nics: node 'a-0' needs a NIC to reach the other nodes",
    ),
    "GPU model as a CPU": ("nodes: [{name: a, cpus: {model: T4}}]", "nodes[0].cpus.model: 'T4' is a GPU, not a CPU"),
    "memory not whole bytes": (
        "nodes: [{name: a, cpus: {model: cpu-local, memory: 0.5 B}}]",
        "nodes[0].cpus.memory: must be a whole number of bytes",
    ),
}


def run_cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_cluster_file_is_one_line_and_exit_2(case, tmp_path, capsys):
    text, expected = BAD_FILES[case]
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    code, out, err = run_cli(["cluster", "show", str(path)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1, err
    assert err.startswith(f"autodist: error: {path}: "), err
    assert expected in err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--preset", "dgx-h10"], "preset: unknown preset 'dgx-h10' (did you mean 'dgx-h100'?)"),
        (["--preset", "dgx-h100:0"], "preset: node count must be an integer from 1 to 100000, got 'dgx-h100:0'"),
        (["--preset", "dgx-h100:x"], "node count must be an integer from 1 to 100000"),
        (["--preset", "dgx-h100:1000000"], "node count must be an integer from 1 to 100000"),
        (["/nonexistent/cluster.yaml"], "/nonexistent/cluster.yaml: no such file"),
        ([], "give exactly one cluster source"),
    ],
)
def test_bad_cluster_arguments(argv, expected, capsys):
    code, out, err = run_cli(["cluster", "show", *argv], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert expected in err


@pytest.mark.parametrize(
    "document, expected",
    [
        ({"format": "autodist.resource_spec", "version": 1, "nodes": [{"name": "a", "devices": []}]},
         "nodes[0]: malformed node (KeyError: 'fabric')"),
        ({"format": "autodist.resource_spec", "version": 7, "nodes": []}, "version: unsupported version 7"),
    ],
)
def test_bad_resource_spec_json(document, expected, tmp_path, capsys):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(document))
    code, out, err = run_cli(["cluster", "show", str(path)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"{path}: {expected}" in err


def test_directory_instead_of_file(tmp_path, capsys):
    code, _, err = run_cli(["cluster", "show", str(tmp_path)], capsys)
    assert code == 2 and err.count("\n") == 1 and "is a directory" in err


def test_two_sources_are_refused_by_argparse(capsys):
    code, _, err = run_cli(["cluster", "show", "x.yaml", "--preset", "dgx-h100"], capsys)
    assert code == 2 and "not allowed with" in err


def test_error_message_example_from_the_issue(tmp_path, capsys):
    path = tmp_path / "cluster.yaml"
    path.write_text(textwrap.dedent(f"""\
        nodes:
          - {GOOD_NODE}
          - name: b
            preset: g4dn.12xlarge
            nics:
              - kind: ethernet
                bandwidth: -1
        """))
    _, _, err = run_cli(["cluster", "show", str(path)], capsys)
    assert err == f"autodist: error: {path}: nodes[1].nics[0].bandwidth: must be positive, got -1\n"
