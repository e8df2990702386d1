"""NCCL's tree against its ring for an allreduce across nodes: the tree for small messages, the ring for large ones.

Formulas (ring: ../shared/reference/hardware.md, "Cost formulas in common use"; tree: cost_models.comm's
``_tree``), with the preset's own link figures: ``B`` the ring's slowest achieved bandwidth (the NICs of a node
summed, NCCL's multi-rail), ``a`` the inter-node hop's latency, ``n`` GPUs on ``N`` nodes of ``G``:
ring ``2(n-1)/n S/B + 2(n-1) a``; tree ``2 S/B + 2 (ceil(log2 N) + G - 1) a``.
"""

import json
import math
import subprocess
import sys

import pytest

from autodist.resource_spec import load_cluster
from cost_models.comm import LINK_EFFICIENCY, CommModel


def _figures(preset):
    spec = load_cluster(preset=preset)
    node = spec.nodes[0]
    nics = len(node.nics)
    bandwidth = nics * node.nics[0].bandwidth * LINK_EFFICIENCY[node.nics[0].kind]
    devices = [d.name for d in spec.gpus()]
    latency = spec.path(devices[7], devices[8]).latency
    return spec, devices, bandwidth, latency, len(spec.nodes), 8


def _ring(S, n, B, a):
    return 2 * (n - 1) / n * S / B + 2 * (n - 1) * a


def _tree(S, N, G, B, a):
    return 2 * S / B + 2 * (math.ceil(math.log2(N)) + G - 1) * a


@pytest.mark.parametrize("preset", ["dgx-a100:2", "dgx-a100:8"])
def test_small_messages_take_the_tree_and_large_ones_the_ring(preset):
    spec, devices, B, a, N, G = _figures(preset)
    n = len(devices)
    comm = CommModel(spec)

    def seconds(S):
        return sum(p.seconds for p in comm.allreduce_phases(S, devices, "ring", collective_ops=True))

    small, large = 4096, 2**31
    assert seconds(small) == pytest.approx(_tree(small, N, G, B, a))
    assert seconds(small) < _ring(small, n, B, a)
    assert seconds(large) == pytest.approx(_ring(large, n, B, a))
    assert seconds(large) < _tree(large, N, G, B, a)
    # The two meet where the tree's deeper bandwidth term catches up with the ring's longer latency.
    crossover = (2 * (n - 1) - 2 * (math.ceil(math.log2(N)) + G - 1)) * a * B / (2 - 2 * (n - 1) / n)
    assert seconds(crossover / 2) == pytest.approx(_tree(crossover / 2, N, G, B, a))
    assert seconds(crossover * 2) == pytest.approx(_ring(crossover * 2, n, B, a))


def test_one_node_and_graph_allreduce_keep_the_ring():
    spec, devices, B, a, N, G = _figures("dgx-a100:2")
    comm = CommModel(spec)
    one_node = devices[:8]
    fabric = spec.nodes[0].fabric
    ring = _ring(4096, 8, fabric.bandwidth * LINK_EFFICIENCY["nvlink"], fabric.latency)
    assert sum(p.seconds for p in comm.allreduce_phases(4096, one_node, "ring", collective_ops=True)) == \
        pytest.approx(ring)
    # Not on collective ops (a hybrid plan's allreduce through ordinary ops): no NCCL tree.
    assert sum(p.seconds for p in comm.allreduce_phases(4096, devices, "ring")) == pytest.approx(_ring(4096, 16, B, a))
    # TensorFlow's CPU collectives run a ring between nodes, whatever the size.
    cpus = load_cluster(preset="cpu-2s-25g:4")
    workers = [node.devices[0].name for node in cpus.nodes]
    cpu_comm = CommModel(cpus)
    assert cpu_comm.allreduce_phases(4096, workers, "ring", collective_ops=True) == cpu_comm._ring(4096, workers)


def test_costmodel_collective_prints_the_tree_time_for_a_small_message():
    spec, devices, B, a, N, G = _figures("dgx-a100:2")
    out = subprocess.run([sys.executable, "-m", "autodist", "costmodel", "collective", "--preset", "dgx-a100:2",
                          "--op", "allreduce", "--bytes", "4096", "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["time"] == pytest.approx(_tree(4096, N, G, B, a))
