"""Collective efficiencies fitted on published nccl-tests figures, and scored leave-one-system-out.

The rows are the allreduce rows (C) of the calibration set,
``../shared/reference/published-training-figures.md``, that name their
GPUs, fabric and NICs well enough to rebuild the cluster; each is an 8-GPU
node or nodes of them, a large message, and the busbw nccl-tests printed.
Each row says which link sets its pace (``kind``): the NVLink fabric inside
one node (``nvlink``, or ``nvls`` where NCCL ran NVLink SHARP), an NVLink
bridge between two GPUs (``nvlink-bridge``), PCIe between GPUs through the
CPU (``pcie-cpu``), else the nodes' NICs (``infiniband``, ``roce`` for RDMA
over Ethernet such as EFA).
At large messages the predicted busbw is proportional to that link's
achieved fraction of line rate, so a row implies that fraction as its
measured over its predicted busbw times the fraction it was predicted
with; a kind's fitted fraction is the median over its rows (repeated to a
fixed point, as latency terms bend the proportion a little).

:func:`evaluate` fits on the rows of every other system, predicts each
system's rows, and reports the error; a row whose kind no other system
has is predicted with the shipped constant and marked so.  The shipped
constants (``cost_models.comm``) are :func:`fit` on all rows.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from cost_models.comm import LINK_EFFICIENCY, NVLS_EFFICIENCY, CommModel

GiB = 2**30


@dataclass(frozen=True)
class PublishedCollective:
    """One allreduce busbw figure of the calibration set (bytes, bytes/s)."""

    row: str
    system: str
    cluster: dict
    message_bytes: int
    busbw: float
    kind: str
    algorithm: str = "nccl"  # "nccl": NCCL's choice (NVLS where it is faster); "ring": NCCL_ALGO=RING


def _nodes(count, gpu, nics=(), fabric=None):
    node = {"name": "n", "count": count, "gpus": {"model": gpu, "count": 8}, "nics": list(nics)}
    if fabric:
        node["fabric"] = fabric
    return {"name": f"{count}x {gpu}", "nodes": [node]}


_A100 = _nodes(1, "A100-80GB")
# C13's box: A100s joined in pairs by 12 NVLinks, the pairs over PCIe Gen4 through the CPU ("PCIe/SYS").  Its
# 2-GPU run is one pair; its 3-GPU run a ring of a pair and a GPU of the next pair, whose PCIe hop sets the pace.
_A100_PAIRS = {"name": "A100 NVLink pairs via CPU", "nodes": [{"name": "n", "gpus": {"model": "A100-80GB", "count": 2},
                                                              "fabric": "pcie-gen4-cpu", "bridge": "nvlink-a100"}]}
_A100_VIA_CPU = {"name": "3x A100 via CPU", "nodes": [{"name": "n", "gpus": {"model": "A100-80GB", "count": 3},
                                                      "fabric": "pcie-gen4-cpu"}]}
_H100 = _nodes(1, "H100-SXM")

ROWS = (
    PublishedCollective("C1", "A100 NVSwitch node", _A100, 8 * GiB, 231.58e9, "nvlink"),
    PublishedCollective("C7 (1 node)", "A100 NVSwitch node", _A100, 4 * GiB, 232.54e9, "nvlink"),
    PublishedCollective("C11", "A100 NVSwitch node", _A100, 1 * GiB, 200e9, "nvlink"),
    PublishedCollective("C13 (2 GPUs)", "A100 NVLink pair", _A100_PAIRS, 12 * GiB, 208e9, "nvlink-bridge"),
    PublishedCollective("C13 (3 GPUs)", "A100 pairs joined through the CPU", _A100_VIA_CPU, 12 * GiB, 20e9,
                        "pcie-cpu"),
    PublishedCollective("C2", "H100 NVSwitch node", _H100, 8 * GiB, 478.87e9, "nvls"),
    PublishedCollective("C4 (NVLS)", "H100 NVSwitch node", _H100, 8 * GiB, 480e9, "nvls"),
    PublishedCollective("C4 (ring)", "H100 NVSwitch node", _H100, 8 * GiB, 370e9, "nvlink", "ring"),
    PublishedCollective("C7 (2 nodes)", "A100 + 4x HDR InfiniBand",
                        _nodes(2, "A100-80GB", ["ib-hdr"] * 4), 4 * GiB, 86e9, "infiniband"),
    PublishedCollective("C8", "A100 + 4x HDR InfiniBand",
                        _nodes(2, "A100-80GB", ["ib-hdr"] * 4), 8 * GiB, 91e9, "infiniband"),
    PublishedCollective("C9", "DGX-A100 + 8x HDR InfiniBand",
                        _nodes(2, "A100-80GB", ["ib-hdr"] * 8), 8 * GiB, 192e9, "infiniband"),
    PublishedCollective("C15", "V100 + 1x EDR InfiniBand",
                        _nodes(4, "V100-16GB", ["ib-edr"]), 512 * 2**20, 12.2e9, "infiniband"),
    PublishedCollective("C14 (2 nodes)", "p4d + 4x EFA", _nodes(2, "A100-40GB", ["efa-100g"] * 4), GiB, 57.17e9,
                        "roce"),
    PublishedCollective("C14 (3 nodes)", "p4d + 4x EFA", _nodes(3, "A100-40GB", ["efa-100g"] * 4), GiB, 31.77e9,
                        "roce"),
    PublishedCollective("C14 (4 nodes)", "p4d + 4x EFA", _nodes(4, "A100-40GB", ["efa-100g"] * 4), GiB, 29.61e9,
                        "roce"),
)

SHIPPED = {**LINK_EFFICIENCY, "nvls": NVLS_EFFICIENCY}


def predicted_busbw(row, efficiency=None):
    """The busbw the communication model predicts for ``row`` with ``efficiency`` (default: shipped)."""
    from autodist.resource_spec.cluster_file import cluster_from_dict

    spec = cluster_from_dict(row.cluster, source=f"row {row.row}")
    devices = [d.name for d in spec.gpus()]
    comm = CommModel(spec, efficiency=efficiency)
    phases = comm.allreduce_phases(row.message_bytes, devices, "ring", collective_ops=row.algorithm == "nccl")
    n = len(devices)
    return row.message_bytes / sum(p.seconds for p in phases) * 2 * (n - 1) / n


def fit(rows=ROWS, rounds=4):
    """Each link kind's achieved fraction of line rate: the median of what its rows imply.

    Latency terms make busbw not quite proportional to the fraction, so the
    fit is repeated from its own result (``rounds`` times) to a fixed point
    that does not depend on the shipped values it starts from.
    """
    current = dict(SHIPPED)
    fitted = {}
    for _ in range(rounds):
        implied = {}
        for row in rows:
            implied.setdefault(row.kind, []).append(current[row.kind] * row.busbw / predicted_busbw(row, current))
        fitted = {kind: statistics.median(values) for kind, values in sorted(implied.items())}
        current.update(fitted)
    return fitted


def evaluate(rows=ROWS):
    """Leave-one-system-out busbw error of every row (the ``collectives_published`` section)."""
    out = []
    for system in dict.fromkeys(r.system for r in rows):
        others = [r for r in rows if r.system != system]
        fitted = fit(others)
        for row in (r for r in rows if r.system == system):
            busbw = predicted_busbw(row, {**SHIPPED, **fitted})
            out.append({"row": row.row, "system": system, "kind": row.kind, "message_bytes": row.message_bytes,
                        "published_busbw": row.busbw, "predicted_busbw": busbw,
                        "error": abs(busbw - row.busbw) / row.busbw,
                        "fitted_on_other_systems": row.kind in fitted})
    scored = [r["error"] for r in out if r["fitted_on_other_systems"]]
    return {
        "rows": out,
        "fitted_on_all_rows": fit(rows),
        "median_error": statistics.median(scored) if scored else None,
        "max_error": max(scored) if scored else None,
        "rows_scored": len(scored),
    }


def report_lines(section):
    """Human-readable lines of :func:`evaluate`'s section (GB/s at the edge)."""
    lines = ["allreduce busbw vs published nccl-tests rows, each system's efficiencies fitted on the other systems:"]
    for r in section["rows"]:
        note = "" if r["fitted_on_other_systems"] else f"  (no other system has {r['kind']}: shipped value, not scored)"
        lines.append(f"  {r['row']:<14} {r['system']:<30} published {r['published_busbw'] / 1e9:6.1f}  predicted "
                     f"{r['predicted_busbw'] / 1e9:6.1f} GB/s  error {r['error'] * 100:5.1f}%{note}")
    if section["rows_scored"]:
        lines.append(f"  {section['rows_scored']} scored rows: median error {section['median_error'] * 100:.1f}%, "
                     f"worst {section['max_error'] * 100:.1f}%")
    return lines
