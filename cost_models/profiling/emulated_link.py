"""The harness that measures TensorFlow's gRPC and collectives over emulated links (cost_models.emulated_link's
record): per preset, a transfer and ring allreduces between two emulated nodes.  Needs root."""

from __future__ import annotations

import os

from cost_models.emulated_link import EmulatedLinkCalibration
from cost_models.profiling.fresh_process import run_json
from cost_models.profiling.transfers import SIZES, machine_description, ps_server

PRESETS = ("emu-100mbit", "emu-1gbit", "emu-10gbit")
LINK_SECONDS = 1.5  # the largest size measured moves in about this long at the link's rate (at most 64 MiB)

_TRANSFERS = """
import json, sys
from cost_models.profiling.transfers import time_transfers
worker, ps, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
print(json.dumps(time_transfers(worker, ps, [int(s) for s in sys.argv[4:]], repeats)))
"""


def sizes_for(rate_bytes):
    """The calibration sizes (``cost_models.profiling.transfers.SIZES``) a link of ``rate_bytes`` moves in LINK_SECONDS."""
    return [s for s in SIZES if s <= rate_bytes * LINK_SECONDS]


def measure_emulated_link(network_of, preset, transfer_bytes, allreduce_sizes, repeats=5):
    """``{"transfer", "allreduces"}``: median seconds of a transfer of ``transfer_bytes`` and of an allreduce of
    each of ``allreduce_sizes`` between the two nodes of ``preset``:2 (no allreduces for none).

    ``network_of(spec)`` brings the emulated network of a cluster up as a context manager
    (launcher.emulation.EmulatedNetwork: the caller passes it, the cost model depends on no launcher).
    """
    from autodist.resource_spec import load_cluster
    from cost_models.profiling.collectives import measure_collectives

    spec = load_cluster(preset=f"{preset}:2")
    first, second = (node.name for node in spec.nodes)
    with network_of(spec) as network:
        worker, ps = network.address(first), network.address(second)
        with ps_server(worker, ps, prefix=network.command(second, [])):
            [transfer] = run_json(_TRANSFERS, [worker, ps, repeats, transfer_bytes], f"the transfer over {preset}",
                                  prefix=network.command(first, []))
        allreduces = measure_collectives(allreduce_sizes, repeats, cluster={"worker": [worker, ps]},
                                         prefixes=[network.command(first, []), network.command(second, [])]) \
            if allreduce_sizes else []
    return {"transfer": transfer, "allreduces": allreduces}


def calibrate_emulated_links(network_of, presets=PRESETS, repeats=5, command=""):
    """Measure each preset (:func:`measure_emulated_link` on ``network_of``'s networks: the largest of
    :func:`sizes_for` its rate for the transfer, all of them for the allreduces)."""
    from autodist.resource_spec.emulated import EMULATED_RATES

    load_before = os.getloadavg()[0]
    points = []
    for preset in presets:
        rate = EMULATED_RATES[preset] / 8
        sizes = sizes_for(rate)
        measured = measure_emulated_link(network_of, preset, sizes[-1], sizes, repeats)
        transfer = measured["transfer"]
        points.append({"preset": preset, "rate_bytes": rate,
                       "efficiency": transfer["bytes"] / transfer["seconds"] / rate, **measured})
    machine = {**machine_description(), "load_average": {"before": round(load_before, 2),
                                                           "after": round(os.getloadavg()[0], 2)}}
    return EmulatedLinkCalibration(points, command, machine)
