"""Transfer and collective phases of one cluster's CommModel, from exact affine fits, cached.

:class:`PhasePrices` is the one route by which placement prices a transfer,
a collective or a PS push in phases (the simulator, the bounds, the
baselines, the report's pricing); the CommModel itself is asked once per
fit, or at every size where no fit of one or two pieces is exact.
"""

from __future__ import annotations

from cost_models import Phase

_PROBE_BYTES = 1 << 30
_CHECK_BYTES = 12_345_679
_SMALL_BYTES = 1 << 10
# where a fit of two pieces is checked, besides around the size where they cross
_PIECE_CHECKS = (1, 100, 10_000, 1_000_000, _CHECK_BYTES, 100_000_000, 3 << 30)


def _line(price, low, high):
    """``[(intercept, slope, links)]`` of each phase, through ``price(low)`` and ``price(high)``; None where their
    links differ."""
    a, b = price(low), price(high)
    if [p.links for p in a] != [p.links for p in b]:
        return None
    slopes = [(q.seconds - p.seconds) / (high - low) for p, q in zip(a, b)]
    return [(p.seconds - slope * low, slope, p.links) for p, slope in zip(a, slopes)]


def _total(piece, nbytes):
    return sum(a + b * nbytes for a, b, _ in piece)


def _matches(pieces, price, nbytes):
    """Whether the fastest of ``pieces`` gives ``price(nbytes)``'s phases: the same links, seconds to 1e-9."""
    piece = min(pieces, key=lambda p: _total(p, nbytes))
    phases = price(nbytes)
    return [p.links for p in phases] == [links for _, _, links in piece] and all(
        abs(a + b * nbytes - p.seconds) <= 1e-9 * max(p.seconds, 1e-9) for (a, b, _), p in zip(piece, phases))


def _affine_fit(price):
    """Pieces of ``price(nbytes)``: each a list of ``(intercept, slope, links)`` per phase, the fastest piece at a
    size being its phases; None where no fit of one or two pieces holds.

    One piece where the phases are affine in the bytes; else two (NCCL's tree for small messages and its ring
    for large ones: the faster at each size), fitted at the small and the large end and checked at sizes in
    between and around where they cross.
    """
    one = _line(price, 0, _PROBE_BYTES)
    if one is not None and _matches([one], price, _CHECK_BYTES):
        return [one]
    small, large = _line(price, 0, _SMALL_BYTES), _line(price, _PROBE_BYTES, 2 * _PROBE_BYTES)
    if small is None or large is None:
        return None
    pieces = [small, large]
    checks = list(_PIECE_CHECKS)
    slope = sum(b for _, b, _ in small) - sum(b for _, b, _ in large)
    if slope > 0:
        cross = (sum(a for a, _, _ in large) - sum(a for a, _, _ in small)) / slope
        if 0 < cross < _PROBE_BYTES:
            checks += [int(cross * 0.99), int(cross), int(cross) + 1, int(cross * 1.01) + 1]
    return pieces if all(_matches(pieces, price, n) for n in checks) else None


class PhasePrices:
    """The phases of ``comm`` (a cost_models.comm.CommModel) by device names and bytes, cached.

    ``overhead``: TensorFlow's fixed software cost per tensor
    (``CommModel.per_tensor_overhead``), spent at the endpoints.
    """

    def __init__(self, comm):
        self.comm = comm
        self.reset()

    def reset(self):
        """Forget every cached price (after ``comm``'s constants changed: cost_models.fitting.cluster_published)."""
        self.overhead = float(getattr(self.comm, "per_tensor_overhead", 0.0))
        self._stages = {}
        self._link_tuples = {}
        self._affine_fits = {}

    def phase_list(self, key, make, count=1):
        """Cached ``(latency, occupancy, links)`` stages of the phases ``make()`` returns.

        The CommModel's per-tensor overhead (TensorFlow's fixed software
        cost per tensor, at the endpoints) is taken out of the first phase
        as latency that occupies no link; ``count`` identical transfers
        issued together pay it once and occupy the links back to back.
        Equal link tuples are handed out as one object (the simulator's link
        queue knows wide link sets by identity).
        """
        stages = self._stages.get(key)
        if stages is None:
            stages = []
            for i, phase in enumerate(make()):
                latency = min(self.overhead, phase.seconds) if i == 0 else 0.0
                links = self._link_tuples.setdefault(phase.links, phase.links)
                stages.append((latency, (phase.seconds - latency) * count, links))
            self._stages[key] = stages
        return stages

    def allreduce_phases(self, devices, algorithm, nbytes, collective_ops=False, horovod=False):
        """One allreduce as the runtime runs it, from a per-(devices, algorithm) affine fit when exact.

        ``collective_ops``: on collective ops (``CommModel.allreduce_phases``),
        else summed by ordinary ops over gRPC (``CommModel.graph_allreduce_phases``);
        ``horovod``: one of Horovod's fused collectives (on collective ops).
        See :meth:`_affine` for the fit.
        """
        return self._affine(("ar", devices, algorithm, collective_ops, horovod), nbytes,
                            lambda n: self._priced_allreduce(n, list(devices), algorithm, collective_ops, horovod))

    def sparse_allgather_phases(self, devices, nbytes, horovod=False):
        """``CommModel.sparse_allgather_phases`` (``nbytes`` of rows per replica; ``horovod``: Horovod's gather),
        from an affine fit when exact."""
        return self._affine(("ag", devices, horovod), nbytes,
                            lambda n: self.comm.sparse_allgather_phases(n, list(devices), horovod))

    def transfer_phases(self, src, dst, nbytes):
        """``CommModel.transfer_phases``, from a per-(src, dst) affine fit when exact (see :meth:`_affine`)."""
        return self._affine(("p2p", src, dst), nbytes, lambda n: self.comm.transfer_phases(src, dst, n))

    def ps_phases(self, src, dst, nbytes):
        """``CommModel.ps_phases``, from a per-(src, dst) affine fit when exact (see :meth:`_affine`)."""
        return self._affine(("ps", src, dst), nbytes, lambda n: self.comm.ps_phases(src, dst, n))

    def _priced_allreduce(self, nbytes, devices, algorithm, collective_ops, horovod):
        if collective_ops:
            return self.comm.allreduce_phases(nbytes, devices, algorithm, collective_ops=True, horovod=horovod)
        return self.comm.graph_allreduce_phases(nbytes, devices, algorithm)

    def _affine(self, key, nbytes, price):
        """``price(nbytes)``'s phases, from an affine fit of ``price`` cached under ``key`` when it is exact.

        The CommModel's phases are latency plus bytes over bandwidth, so two
        probes give each phase's intercept and slope and a new size costs no
        walk over devices and paths.  A third probe checks the fit.  Where it
        fails, a fit of two pieces, the faster at each size, is tried (NCCL's
        choice between its tree and its ring, see :func:`_affine_fit`); where
        that fails too (e.g. unequal nodes, whose slowest node changes with
        size, or a calibrated loopback), every size is asked of ``price``.
        """
        if key not in self._affine_fits:
            self._affine_fits[key] = _affine_fit(price)
        pieces = self._affine_fits[key]
        if pieces is None:
            return price(nbytes)
        piece = pieces[0] if len(pieces) == 1 else min(pieces, key=lambda p: _total(p, nbytes))
        return [Phase(a + b * nbytes, links) for a, b, links in piece]
