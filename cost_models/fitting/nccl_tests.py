"""A user's own cluster as truth: read NVIDIA nccl-tests output and fit the cluster's link constants to it.

``autodist cluster calibrate --nccl-tests FILE`` runs :func:`read_nccl_tests`
on each file (the stdout of ``all_reduce_perf``, ``all_gather_perf``,
``reduce_scatter_perf`` or ``broadcast_perf`` as users run them on their
nodes) and :func:`calibrate` on the cluster they ran on:

- the links of the tier each run measured (the node's fabric, or its NVLink
  bridge for a bridged pair, when the run is on one node; the NICs when it
  spans nodes) get the bandwidth and latency that make the communication
  model's own pricing of that run closest to it (least squares on log time
  over every size, so small-message latency and large-message bandwidth weigh
  alike), for collectives of other shapes;
- the measured curves themselves are kept in the cluster (``collectives:``),
  and a collective of a measured shape is priced from its curve.

The output format read is nccl-tests' own (its README, "Performance" doc):
``#  Rank  r Group g Pid p on HOST device d [bus] NAME`` lines name the
ranks, each result row is ``size count type [redop] [root]`` then the
out-of-place and in-place ``time algbw busbw #wrong`` columns, and the run
ends with ``# Avg bus bandwidth``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from autodist.errors import InputError
from autodist.resource_spec.measured import MeasuredCollective
from autodist.resource_spec.spec import ResourceSpec

# nccl-tests binary -> collective
BINARIES = {"all_reduce_perf": "allreduce", "all_gather_perf": "allgather", "reduce_scatter_perf": "reducescatter",
            "broadcast_perf": "broadcast"}
# nccl-tests data type names -> bytes per element
TYPE_BYTES = {"int8": 1, "uint8": 1, "char": 1, "int32": 4, "uint32": 4, "int": 4, "int64": 8, "uint64": 8,
              "half": 2, "float16": 2, "bfloat16": 2, "float": 4, "float32": 4, "double": 8, "float64": 8,
              "f8e4m3": 1, "f8e5m2": 1}
REDUCTIONS = ("sum", "prod", "max", "min", "avg", "mulsum")
# Latencies per link the fit starts from (seconds): 0.1 us to 1 ms.
LATENCY_GRID = tuple(10.0 ** (k / 4) * 1e-7 for k in range(17))
_RANK = re.compile(r"^#\s*Rank\s+(\d+)\b.*?\bon\s+(\S+)\s+device\s+(\d+)(?:\s+\[[^\]]*\])?\s*(.*)$")
_BINARY = re.compile(r"\b(" + "|".join(BINARIES) + r")\b")


@dataclass(frozen=True)
class NcclTestsRun:
    """One nccl-tests run: its collective, where its ranks ran, and the out-of-place time of each size."""

    op: str
    hosts: tuple  # the host of each rank, in rank order
    gpu: str
    sizes: tuple
    seconds: tuple
    busbw: tuple  # bytes/s, as the file reports them
    source: str

    @property
    def nodes(self):
        return len(dict.fromkeys(self.hosts))

    @property
    def ranks_per_node(self):
        return len(self.hosts) // self.nodes

    def curve(self):
        return MeasuredCollective(self.op, self.nodes, self.ranks_per_node, self.sizes, self.seconds, self.source)


def read_nccl_tests(path, op=None):
    """The :class:`NcclTestsRun` in nccl-tests output file ``path`` (InputError naming the line it cannot read).

    ``op`` names the collective where the file does not (no binary name in it); otherwise it is read from the
    binary's name, or from the columns (a reduction or not, a root or not, count against size).
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise InputError(f"cannot read the nccl-tests output: {exc.strerror}", source=path) from None
    ranks, rows, named, ended = {}, [], set(), False
    for number, line in enumerate(lines, 1):
        text = line.strip()
        named.update(_BINARY.findall(text))
        rank = _RANK.match(text)
        if rank:
            ranks[int(rank.group(1))] = (rank.group(2), rank.group(4).strip())
        elif text.startswith("# Avg bus bandwidth"):
            ended = True
        elif text and text.split()[0].isdigit() and not text.startswith("#"):
            rows.append((number, _row(text, path, number)))
    if not rows:
        raise InputError("no nccl-tests result rows (size count type ... time algbw busbw) in the file", source=path)
    if not ended:
        raise InputError(f"line {len(lines)}: the file ends before nccl-tests' closing '# Avg bus bandwidth' line "
                         "(truncated?)", source=path)
    if not ranks:
        raise InputError("no '#  Rank N ... on HOST device D' lines: which GPUs ran it is unknown", source=path)
    hosts = tuple(ranks[r][0] for r in sorted(ranks))
    per_host = {h: hosts.count(h) for h in hosts}
    if len(set(per_host.values())) != 1:
        raise InputError(f"ranks are spread unevenly over the hosts ({per_host})", source=path)
    op = op or _collective(named, rows, len(hosts), path)
    sizes = [row["size"] for _, row in rows]
    for (number, _), before, size in zip(rows[1:], sizes, sizes[1:]):
        if size <= before:
            raise InputError(f"line {number}: sizes must increase ({size} after {before})", source=path)
    unit = _time_unit([row for _, row in rows])
    return NcclTestsRun(op, hosts, ranks[min(ranks)][1], tuple(sizes), tuple(row["time"] * unit for _, row in rows),
                        tuple(row["busbw"] for _, row in rows), source=path)


def _time_unit(rows):
    """Seconds per unit of the time column: microseconds today, milliseconds in nccl-tests before 2.0, told
    apart by the rows' own algbw (size / time)."""
    row = max(rows, key=lambda r: r["size"])
    if row["algbw"] <= 0:
        return 1e-6
    ratio = row["time"] / (row["size"] / row["algbw"])
    return 1e-3 if abs(math.log10(ratio) - 3) < abs(math.log10(ratio) - 6) else 1e-6


def _row(text, path, number):
    """One result row: size, count, type, optional redop and root, then two groups of time, algbw, busbw, #wrong."""
    fields = text.split()
    head = fields[:-8]
    try:
        if len(fields) < 11 or len(head) > 5 or head[2] not in TYPE_BYTES:
            raise ValueError
        size, count = int(head[0]), int(head[1])
        time, algbw, busbw = float(fields[-8]), float(fields[-7]) * 1e9, float(fields[-6]) * 1e9
    except (ValueError, IndexError):
        raise InputError(f"line {number}: cannot read this nccl-tests result row: {text[:80]!r}", source=path) \
            from None
    if size <= 0 or not time > 0 or not math.isfinite(time):
        raise InputError(f"line {number}: a size and a time must be positive: {text[:80]!r}", source=path)
    redop = next((f for f in head[3:] if f in REDUCTIONS), None)
    root = next((int(f) for f in head[3:] if re.fullmatch(r"-?\d+", f)), -1)
    return {"size": size, "elements": count * TYPE_BYTES[head[2]], "redop": redop, "root": root,
            "time": time, "algbw": algbw, "busbw": busbw}


def _collective(named, rows, ranks, path):
    """The collective a file measured: its binary's name, else what its columns say."""
    if len(named) == 1:
        return BINARIES[named.pop()]
    if len(named) > 1:
        raise InputError(f"the file names several nccl-tests binaries ({', '.join(sorted(named))}): one run per "
                         "file", source=path)
    row = rows[-1][1]
    if row["root"] >= 0:
        return "broadcast"
    per_rank = row["elements"] * ranks == row["size"]
    if row["redop"] is None:
        return "allgather"
    return "reducescatter" if per_rank and ranks > 1 else "allreduce"


# -- fitting ----------------------------------------------------------------


def measured_devices(spec, run, where):
    """The GPUs ``run`` ran on, in ``spec``: the first ``ranks_per_node`` GPUs of its first ``nodes`` nodes."""
    if run.nodes > len(spec.nodes):
        raise InputError(f"the run spans {run.nodes} nodes; the cluster has {len(spec.nodes)}", source=where)
    devices = []
    for node in spec.nodes[:run.nodes]:
        gpus = node.gpus()
        if len(gpus) < run.ranks_per_node:
            raise InputError(f"the run has {run.ranks_per_node} ranks per node; node {node.name!r} has "
                             f"{len(gpus)} GPUs", source=where)
        devices += [g.name for g in gpus[:run.ranks_per_node]]
    return devices


def calibrate(spec, runs, comm_model_of):
    """The cluster ``spec`` with link constants fitted to ``runs`` and their curves kept, and a fit record.

    ``comm_model_of(spec)`` gives the communication model of a cluster (``CostModel.comm_model``): the fit
    prices each run with the same code a plan's collectives are priced with.
    """
    import numpy as np
    from scipy.optimize import minimize

    fitted, records = ResourceSpec(spec.nodes, spec.name), []
    # one node's runs first: they fix the fabric that a run across nodes also crosses
    for tier in ("intra", "inter"):
        tier_runs = [r for r in runs if (r.nodes == 1) == (tier == "intra")]
        if not tier_runs:
            continue
        devices = [measured_devices(spec, r, r.source) for r in tier_runs]
        base = _tier_link(fitted, tier_runs[0], tier)

        def loss(x):
            candidate = _with_tier_link(fitted, tier_runs[0], tier, base.bandwidth * math.exp(x[0]), math.exp(x[1]))
            comm = comm_model_of(candidate)
            return sum((math.log(_priced(comm, r, s, d)) - math.log(t)) ** 2
                       for r, d in zip(tier_runs, devices) for s, t in zip(r.sizes, r.seconds))

        # a coarse grid first: where another link binds, the loss is flat in this one's figures
        grid = [(b, l) for b in np.linspace(math.log(1 / 64), math.log(4), 25) for l in np.log(LATENCY_GRID)]
        start = np.array(min(grid, key=loss))
        best = minimize(loss, start, method="Nelder-Mead", options={"xatol": 1e-4, "fatol": 1e-8, "maxiter": 400})
        bandwidth, latency = base.bandwidth * math.exp(best.x[0]), math.exp(best.x[1])
        fitted = _with_tier_link(fitted, tier_runs[0], tier, bandwidth, latency)
        records.append({"tier": tier, "link": base.kind, "bandwidth": bandwidth, "latency": latency,
                        "was": {"bandwidth": base.bandwidth, "latency": base.latency}})
    return ResourceSpec(fitted.nodes, spec.name, collectives=[r.curve() for r in runs]), records


def busbw_errors(comm, run, devices):
    """Relative error of the priced busbw of ``run``'s every size against the file's (a list, size order): busbw is
    bytes over time times a constant, so it is the measured time over the priced one, less 1."""
    return [seconds / _priced(comm, run, size, devices) - 1.0 for size, seconds in zip(run.sizes, run.seconds)]


def _priced(comm, run, nbytes, devices):
    return sum(p.seconds for p in comm.collective_phases(run.op, nbytes, devices))


def _tier_field(node, run, tier):
    """The field of ``node`` holding the links ``run`` crossed: ``nics`` across nodes; in one node its NVLink
    ``bridge`` for a bridged pair, else its ``fabric``."""
    if tier == "inter":
        return "nics"
    return "bridge" if node.bridge is not None and run.ranks_per_node == 2 else "fabric"


def _tier_link(spec, run, tier):
    link = getattr(spec.nodes[0], _tier_field(spec.nodes[0], run, tier))
    return link[0] if isinstance(link, list) else link


def _with_tier_link(spec, run, tier, bandwidth, latency):
    """``spec`` with the links of ``tier`` on every node at ``bandwidth`` and ``latency``."""
    nodes = []
    for node in spec.nodes:
        name = _tier_field(node, run, tier)
        link = getattr(node, name)
        links = [replace(n, bandwidth=bandwidth, latency=latency) for n in link] if isinstance(link, list) \
            else replace(link, bandwidth=bandwidth, latency=latency)
        nodes.append(replace(node, **{name: links}))
    return ResourceSpec(nodes, spec.name)
