"""Collectives measured on a user's own cluster, kept with the cluster they were measured on.

``autodist cluster calibrate --nccl-tests FILE`` reads NVIDIA's nccl-tests
output and writes the measured curves into the cluster file it writes
(``collectives:``); the communication model prices a collective of the same
shape (operation, nodes, ranks per node) from the curve rather than from the
links' figures: the user's own cluster is the truth where it was measured.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

# The collectives nccl-tests measures, by the names autodist uses.
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast")


@dataclass(frozen=True)
class MeasuredCollective:
    """One nccl-tests curve: ``seconds[i]`` for a collective of ``sizes[i]`` bytes (nccl-tests' size column).

    Attributes
    ----------
    op : str
        One of :data:`COLLECTIVES`.
    nodes, ranks_per_node : int
        The shape it was measured on: one rank per GPU, ``ranks_per_node`` GPUs on each of ``nodes`` nodes.
    sizes : tuple of int
        Message sizes, bytes, strictly increasing.
    seconds : tuple of float
        The out-of-place time at each size.
    source : str
        Where it came from (the file, its command), for the report.
    """

    op: str
    nodes: int
    ranks_per_node: int
    sizes: tuple
    seconds: tuple
    source: str = ""

    def applies_to(self, op, groups):
        """Whether a collective ``op`` over ``groups`` (its devices, grouped by node) has this curve's shape."""
        return (op == self.op and len(groups) == self.nodes
                and all(len(group) == self.ranks_per_node for group in groups))

    def seconds_for(self, nbytes):
        """The time of ``nbytes``: log-log interpolation between measured sizes; below the smallest, the
        smallest's time (its latency); above the largest, the largest's time grown at its bandwidth."""
        sizes, seconds = self.sizes, self.seconds
        if nbytes <= sizes[0]:
            return seconds[0]
        if nbytes >= sizes[-1]:
            return seconds[-1] * nbytes / sizes[-1]
        i = bisect.bisect_right(sizes, nbytes)
        x0, x1, y0, y1 = sizes[i - 1], sizes[i], seconds[i - 1], seconds[i]
        w = math.log(nbytes / x0) / math.log(x1 / x0)
        return math.exp(math.log(y0) + w * math.log(y1 / y0))

    def to_dict(self):
        return {"op": self.op, "nodes": self.nodes, "ranks_per_node": self.ranks_per_node,
                "sizes": list(self.sizes), "seconds": list(self.seconds), "source": self.source}
