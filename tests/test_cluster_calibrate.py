"""``autodist cluster calibrate --nccl-tests``: a user's own cluster as truth.

The fixtures in tests/data/nccl_tests are written in nccl-tests' documented
output format (its README and "Performance" doc: ``#  Rank`` lines, result
rows of ``size count type redop root`` then out-of-place and in-place
``time algbw busbw #wrong``, the closing ``# Avg bus bandwidth``; the older
format without the root column and with ``N/A`` in ``#wrong`` for the
NVLink-bridge pair), with curves of our own for topologies the presets lack:
8 GPUs on PCIe only, two PCIe GPUs joined by an NVLink bridge, two
InfiniBand nodes whose small messages take tens of microseconds.
"""

import json
import os
import subprocess
import sys

import pytest

from autodist.errors import InputError
from autodist.resource_spec.cluster_file import dump_cluster, parse_cluster, read_cluster_file
from autodist.resource_spec.spec import ResourceSpec
from cost_models import CostModel
from cost_models.fitting.nccl_tests import busbw_errors, measured_devices, read_nccl_tests

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "nccl_tests")


def _data(name):
    return os.path.join(DATA, name)


def _autodist(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "autodist", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def _calibrate(tmp_path, files, *cluster):
    out = tmp_path / "calibrated.yaml"
    result = _autodist("cluster", "calibrate", "--nccl-tests", *[_data(f) for f in files], *cluster, "-o", str(out))
    assert result.returncode == 0, result.stderr
    return read_cluster_file(str(out)), result.stdout


@pytest.mark.parametrize("files, cluster", [
    (["dgx_h100_all_reduce.txt"], ["--preset", "dgx-h100:1"]),
    (["pcie8_all_reduce.txt"], ["--cluster", _data("pcie8.yaml")]),
    (["bridge2_all_gather.txt"], ["--cluster", _data("bridge2.yaml")]),
    (["dgx_h100_all_reduce.txt", "ib2x8_all_reduce.txt"], ["--preset", "dgx-h100:2"]),
])
def test_the_calibrated_cluster_reproduces_every_measured_size_within_ten_percent(tmp_path, files, cluster):
    calibrated, _ = _calibrate(tmp_path, files, *cluster)
    comm = CostModel.default().comm_model(calibrated)
    for name in files:
        run = read_nccl_tests(_data(name))
        errors = busbw_errors(comm, run, measured_devices(calibrated, run, name))
        assert max(abs(e) for e in errors) <= 0.10, (name, errors)


def test_costmodel_collective_on_the_written_cluster_prints_the_files_busbw(tmp_path):
    """The user's command, end to end: the 2-node file's 8-byte allreduce (35 us measured; the links alone
    price 108 us: the model's tree pays the slowest hop's latency at every level)."""
    _calibrate(tmp_path, ["dgx_h100_all_reduce.txt", "ib2x8_all_reduce.txt"], "--preset", "dgx-h100:2")
    run = read_nccl_tests(_data("ib2x8_all_reduce.txt"))
    for size, busbw in ((run.sizes[0], None), (run.sizes[-1], run.busbw[-1])):
        out = _autodist("costmodel", "collective", "--cluster", str(tmp_path / "calibrated.yaml"), "--op", "allreduce",
                        "--bytes", str(size), "--format", "json")
        assert out.returncode == 0, out.stderr
        priced = json.loads(out.stdout)
        assert priced["time"] == pytest.approx(run.seconds[run.sizes.index(size)], rel=1e-9)
        if busbw is not None:
            assert priced["busbw"] == pytest.approx(busbw, rel=0.01)  # the file prints busbw to 0.01 GB/s


@pytest.mark.parametrize("files, cluster, link", [
    ("pcie8_all_reduce.txt", "pcie8.yaml", "fabric"),
    ("bridge2_all_gather.txt", "bridge2.yaml", "bridge"),
])
def test_the_fitted_links_alone_reproduce_a_curve_the_model_can_express(tmp_path, files, cluster, link):
    """Curves of the model's own form (latency + bytes / bandwidth): the fit finds the links that give them,
    on the link the run crossed, without the kept curve."""
    calibrated, printed = _calibrate(tmp_path, [files], "--cluster", _data(cluster))
    before = read_cluster_file(_data(cluster)).nodes[0]
    after = calibrated.nodes[0]
    assert getattr(after, link).bandwidth != getattr(before, link).bandwidth
    other = "fabric" if link == "bridge" else "host_link"
    assert getattr(after, other) == getattr(before, other)
    links_only = CostModel.default().comm_model(ResourceSpec(calibrated.nodes, calibrated.name))
    run = read_nccl_tests(_data(files))
    errors = busbw_errors(links_only, run, measured_devices(calibrated, run, files))
    assert max(abs(e) for e in errors) <= 0.10, errors
    assert "busbw priced from the fitted links" in printed


def test_both_formats_and_every_collective_are_read_from_their_columns():
    new = read_nccl_tests(_data("dgx_h100_all_reduce.txt"))
    assert (new.op, new.nodes, new.ranks_per_node) == ("allreduce", 1, 8)
    assert new.seconds[0] == pytest.approx(12.00e-6) and new.gpu == "NVIDIA H100 80GB HBM3"
    old = read_nccl_tests(_data("bridge2_all_gather.txt"))  # no root column, N/A in #wrong
    assert (old.op, old.nodes, old.ranks_per_node) == ("allgather", 1, 2)
    two = read_nccl_tests(_data("ib2x8_all_reduce.txt"))
    assert (two.nodes, two.ranks_per_node) == (2, 8)
    assert read_nccl_tests(_data("ib2x8_all_reduce.txt"), op="reducescatter").op == "reducescatter"


def test_a_truncated_file_is_one_line_naming_the_line_and_nothing_is_written(tmp_path):
    out = tmp_path / "calibrated.yaml"
    result = _autodist("cluster", "calibrate", "--nccl-tests", _data("truncated_all_reduce.txt"), "--preset",
                       "dgx-h100:1", "-o", str(out))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "line 27" in result.stderr and "truncated_all_reduce" in result.stderr
    assert not out.exists() and os.listdir(tmp_path) == []


def test_a_file_without_its_closing_line_or_a_run_the_cluster_cannot_hold_is_refused(tmp_path):
    text = open(_data("dgx_h100_all_reduce.txt")).read()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[:text.index("# Out of bounds")])
    with pytest.raises(InputError, match="ends before"):
        read_nccl_tests(str(cut))
    result = _autodist("cluster", "calibrate", "--nccl-tests", _data("ib2x8_all_reduce.txt"), "--preset",
                       "dgx-h100:1", "-o", str(tmp_path / "out.yaml"))
    assert result.returncode == 2 and "spans 2 nodes" in result.stderr
    assert not (tmp_path / "out.yaml").exists()


def test_measured_collectives_round_trip_through_the_cluster_file_and_are_checked(tmp_path):
    calibrated, _ = _calibrate(tmp_path, ["pcie8_all_reduce.txt"], "--cluster", _data("pcie8.yaml"))
    assert calibrated.collectives and parse_cluster(dump_cluster(calibrated)) == calibrated
    assert ResourceSpec.from_dict(calibrated.to_dict()) == calibrated
    text = (tmp_path / "calibrated.yaml").read_text()
    with pytest.raises(InputError, match=r"collectives\[0\]\.ranks_per_node"):
        parse_cluster(text.replace("ranks_per_node: 8", "ranks_per_node: 9"))
    with pytest.raises(InputError, match=r"collectives\[0\]\.points\[1\]"):
        parse_cluster(text.replace("- [16,", "- [4,", 1))
