"""CPU seconds of gRPC transfers, per pool of shared cores."""

from __future__ import annotations


def transfer_cpu(problem, message, phases):
    """``{pool: (CPU seconds, transfer seconds)}`` of one gRPC ``message`` moved in ``phases``."""
    duration = sum(latency + occupancy for latency, occupancy, _ in phases)
    return {pool: (seconds, duration) for pool, seconds in problem.grpc_cpu([message]).items()}


def accumulate(total, cpu):
    """Add ``{pool: CPU seconds}`` to ``total``."""
    for pool, seconds in cpu.items():
        total[pool] = total.get(pool, 0.0) + seconds


def add_share(total, cpu, seconds_beside):
    """Add to ``total`` ``{pool: CPU seconds}`` the share of ``cpu`` (see :func:`transfer_cpu`) spent in the
    first ``seconds_beside`` of each transfer."""
    for pool, (seconds, duration) in cpu.items():
        share = min(seconds_beside, duration) / duration if duration > 0 else 1.0
        total[pool] = total.get(pool, 0.0) + seconds * share

