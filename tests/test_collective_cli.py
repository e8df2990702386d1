"""``autodist costmodel collective``: a virtual nccl-tests (time, algbw, busbw of one collective)."""

import json
import subprocess
import sys

import pytest

from autodist.resource_spec import load_cluster
from cost_models.comm import LINK_EFFICIENCY


def _autodist(*args):
    return subprocess.run([sys.executable, "-m", "autodist", *args], capture_output=True, text=True, timeout=300)


def _collective(*args):
    out = _autodist("costmodel", "collective", *args, "--format", "json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_one_node_reproduces_the_reference_formulas():
    """hardware.md, "Cost formulas in common use" and "Collective measurements": allreduce
    t = 2(n-1)/n S/B + 2(n-1) a, reduce-scatter / all-gather t = (n-1)/n S/B + (n-1) a,
    busbw = algbw 2(n-1)/n; B is NVLink's per-direction rate at its achieved efficiency."""
    fabric = load_cluster(preset="dgx-h100").nodes[0].fabric
    B, a, n, S = fabric.bandwidth * LINK_EFFICIENCY["nvlink"], fabric.latency, 8, 2**30
    allreduce = _collective("--preset", "dgx-h100", "--op", "allreduce", "--bytes", str(S))
    assert allreduce["time"] == pytest.approx(2 * (n - 1) / n * S / B + 2 * (n - 1) * a)
    assert allreduce["algbw"] == pytest.approx(S / allreduce["time"])
    assert allreduce["busbw"] == pytest.approx(allreduce["algbw"] * 2 * (n - 1) / n)
    assert len(allreduce["devices"]) == n
    for op in ("allgather", "reducescatter"):
        half = _collective("--preset", "dgx-h100", "--op", op, "--bytes", str(S))
        assert half["time"] == pytest.approx((n - 1) / n * S / B + (n - 1) * a)
        assert half["busbw"] == pytest.approx(S / half["time"] * (n - 1) / n)
    two = ["node-0/GPU:0", "node-0/GPU:5"]
    bcast = _collective("--preset", "dgx-h100", "--op", "broadcast", "--bytes", str(S), "--devices", *two)
    assert bcast["devices"] == two and bcast["time"] == pytest.approx(S / B + a)
    assert bcast["busbw"] == pytest.approx(bcast["algbw"])


def test_text_output_names_the_figures():
    out = _autodist("costmodel", "collective", "--preset", "p4d.24xlarge:2", "--op", "allreduce", "--bytes", "65536")
    assert out.returncode == 0, out.stderr
    assert "over 16 devices" in out.stdout and "algbw" in out.stdout and "busbw" in out.stdout


@pytest.mark.parametrize("args, named", [
    (["--bytes", "0"], "--bytes"),
    (["--bytes", "-4096"], "--bytes"),
    (["--bytes", "lots"], "--bytes"),
    (["--op", "alltoall"], "--op"),
    (["--devices", "node-0/GPU:0"], "--devices"),
    (["--devices", "node-0/GPU:0", "node-7/GPU:0"], "node-7/GPU:0"),
])
def test_bad_input_is_one_line_and_exit_2(args, named):
    base = {"--op": "allreduce", "--bytes": "1024"}
    given = dict(base)
    rest = []
    if args[0] in base:
        given[args[0]] = args[1]
    else:
        rest = args
    argv = ["costmodel", "collective", "--preset", "dgx-h100"]
    for key, value in given.items():
        argv += [key, value]
    out = _autodist(*argv, *rest)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and named in lines[0], out.stderr
    assert out.stdout == ""
