"""Simulated-annealing search over strategies, starting from the best baselines.

Budget: either ``budget_s`` seconds of wall clock for the whole
:func:`optimize` call (problem set-up and baselines included), or
``moves``, an exact number of moves: a search that repeats byte for byte on
any machine.  The search counts its own moves and evaluations.

Schedule: energies are step times relative to the start of a round.  Before
the first round, up to :data:`SAMPLE_MOVES` moves sampled around the start
(within :data:`CALIBRATION_SHARE` of a wall-clock budget) give the uphill deltas;
the start temperature makes an uphill move of the smaller half of that sample
accepted :data:`START_ACCEPTANCE` of the time on average (the larger half are
moves such as a replica count or a variable off NCCL that change the step
several-fold: a temperature that accepts them is a random walk), the end
temperature an uphill move of the whole sample :data:`END_ACCEPTANCE` of the
time, and the temperature falls geometrically between them over the first
``1 - QUENCH`` of each round; the rest of the round is a descent at zero
temperature (only improvements are accepted).
A move that leaves the energy unchanged (a plateau: within
:data:`PLATEAU` relative, the rounding of a sum taken in another order) is
accepted with probability ``T / T_start``, so the walk crosses plateaus
early and stops drifting late.

Restarts: the budget is split into :data:`ROUNDS` rounds; the first starts
from the best baseline, the second from the next-best distinct baseline,
and the others from the best strategy found so far; the last round is a
descent from it (zero temperature throughout), so that every seed ends in
a local optimum of the best region found rather than wherever its last
walk cooled.  The best strategy seen
(fitting memory first, then fastest) is returned, so the search never
returns anything worse than the best baseline, nor than training on one
replica (evaluated before the first round: the later rounds start from it
where it is the best).

A candidate whose step takes, before a one-client plan's pulls are run,
long enough that its move is rejected anyway (the draw an uphill move is
judged by is taken then) is not simulated further (``Annealer._judge``):
the walk and its result are those of full simulations.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field, replace

from autodist.collective_stages import distinct_algorithms
from autodist.strategy import COMPRESSIONS
from placement.baselines import all_baselines
from placement.bounds import lower_bound
from placement.problem import Problem
from placement.schedule import Budget, temperature_for
from placement.simulator import Simulator
from placement.space import StrategySpace, changes, copy_strategy

SAMPLE_MOVES = 32
# A wall-clock budget's share, of what is left when the search starts, that the calibration may take.
CALIBRATION_SHARE = 0.1
START_ACCEPTANCE = 0.85
END_ACCEPTANCE = 0.01
QUENCH = 0.3
ROUNDS = 3
PLATEAU = 1e-12
MEMORY_PENALTY = 10.0
PROGRESS_UPDATES = 100
# How many scores of candidates tried from one strategy a round keeps (see Annealer._round).
MAX_TRIED = 4096
# Acceptance is reported over the moves of the first and the last tenth of the search's budget (see Annealer.stats).
ACCEPTANCE_WINDOW = 0.1


@dataclass
class SearchResult:
    """The chosen strategy, its simulation, every baseline and search statistics.

    ``simulator``: the search's :class:`~placement.simulator.Simulator` (its
    ``problem`` and caches), for pricing more strategies of the same job;
    ``stats["warning"]``: set when the budget ran out before the search
    made a move (the strategy is then the best baseline).
    """

    strategy: object
    simulation: object
    candidates: list
    lower_bound: float
    stats: dict = field(default_factory=dict)
    simulator: object = None

    def baseline(self, name):
        return next(c for c in self.candidates if c.name == name)


def energy_of(simulation):
    """Step time of the global batch, penalised by the worst relative memory excess."""
    excess = 0.0
    for device, extra in simulation.over_memory.items():
        excess = max(excess, extra / max(simulation.memory_limit[device], 1))
    return simulation.step_time * (1.0 + MEMORY_PENALTY * excess)


@dataclass(frozen=True)
class Score:
    """What the search keeps of a simulation (not its busy times, which hold the whole simulated run)."""

    step_time: float
    energy: float
    fits: bool

    @classmethod
    def of(cls, simulation):
        return cls(simulation.step_time, energy_of(simulation), simulation.fits)


def _rank(score):
    return (not score.fits, score.energy)


class Annealer:
    """Anneals strategies with :class:`~placement.space.StrategySpace` moves, evaluated by a Simulator."""

    def __init__(self, simulator, space, rng, budget, progress=None):
        self.simulator = simulator
        self.space = space
        self.rng = rng
        self.budget = budget
        self.progress = progress
        self.evaluations = 0
        self.accepted = []  # per move made, whether it was accepted
        self.made_at = []  # per move made, the budget fraction spent when it was made
        self.by_move = {}
        self.best = self.best_score = None
        self.t_start = self.t_end = None

    def evaluate(self, strategy):
        """The :class:`Score` of ``strategy``'s simulation."""
        self.evaluations += 1
        return Score.of(self.simulator.simulate(strategy))

    def _judge(self, candidate, current_energy, base, temperature):
        """``(Score, draw)`` of ``candidate``, the Score None where a time its step takes at least (Simulator's
        ``give_up``, before a one-client plan's pulls) rejects it already; ``draw``: the uniform number an uphill
        move is judged by, where it was drawn for that.  The decisions and the draws are the full simulation's."""
        drawn = []

        def give_up(at_least):
            delta = (at_least - current_energy) / base
            if delta <= PLATEAU:
                return False
            if temperature == 0.0:
                return True
            drawn.append(self.rng.random())
            return drawn[0] >= math.exp(-delta / temperature)

        self.evaluations += 1
        simulation = self.simulator.simulate(candidate, give_up=give_up)
        return (None if simulation is None else Score.of(simulation)), (drawn[0] if drawn else None)

    def _offer(self, strategy, score):
        if self.best_score is None or _rank(score) < _rank(self.best_score):
            self.best, self.best_score = copy_strategy(strategy), score

    def calibrate(self, start):
        """Set the start and end temperatures from the uphill deltas of moves sampled around ``start``."""
        base = self.evaluate(start).energy
        uphill = []
        begin = self.budget.fraction()
        for _ in range(SAMPLE_MOVES):
            if self.budget.fraction() >= begin + CALIBRATION_SHARE * (1.0 - begin):
                break  # moves that are slow to evaluate (a partitioned PS over many nodes) leave time for the search
            candidate = copy_strategy(start)
            self.space.move(candidate)
            delta = self.evaluate(candidate).energy / base - 1.0
            if delta > PLATEAU:
                uphill.append(delta)
        uphill = sorted(uphill) or [1e-3]
        self.t_start = temperature_for(uphill[:(len(uphill) + 1) // 2], START_ACCEPTANCE)
        self.t_end = min(self.t_start, temperature_for(uphill, END_ACCEPTANCE))

    def temperature(self, fraction, descent=False):
        """The temperature at ``fraction`` of a round: geometric cooling, then zero (see the module doc); zero
        throughout a ``descent``."""
        if descent or fraction >= 1.0 - QUENCH:
            return 0.0
        return self.t_start * (self.t_end / self.t_start) ** (fraction / (1.0 - QUENCH))

    def run(self, starts):
        """Anneal in :data:`ROUNDS` rounds from ``starts`` (strategies, best first), the last a descent from the
        best found; return the best found."""
        self.calibrate(starts[0])
        # Not distributing at all is what a user would weigh the plan against too: the search never returns worse.
        undistributed = next((self.space.one_replica(s) for s in starts if s.allreduces_everything()), None)
        if undistributed is not None:
            self._offer(undistributed, self.evaluate(undistributed))
        for k in range(ROUNDS):
            last = k == ROUNDS - 1
            start = starts[k] if k < len(starts) and not last else self.best
            self._round(start, (k + 1) / ROUNDS, descent=last)
        if self.progress is not None:
            self.progress(1.0, self.best_score.step_time)
        return self.best, self.best_score

    def _round(self, start, end, descent=False):
        """Anneal from ``start`` until the budget fraction reaches ``end`` (only improve it: ``descent``).

        A move tried again from the same strategy (as a descent does near its optimum) is not simulated again:
        the scores of the candidates tried from the current strategy are kept, by what they change, until it
        changes.
        """
        current = copy_strategy(start)
        current_score = self.evaluate(current)
        self._offer(current, current_score)
        current_energy = base = current_score.energy
        begin = self.budget.fraction()
        next_report = begin
        tried = {}
        while not self.budget.spent() and self.budget.fraction() < end:
            fraction = self.budget.fraction()
            temperature = self.temperature((fraction - begin) / max(end - begin, 1e-12), descent)
            candidate = copy_strategy(current)
            label = self.space.move(candidate)
            change = changes(current, candidate)
            draw = None
            if not change:  # a move that found nothing to change (e.g. no free PS task)
                score = current_score
            elif change in tried:
                score = tried[change]
            else:
                if len(tried) >= MAX_TRIED:
                    tried.clear()
                score, draw = self._judge(candidate, current_energy, base, temperature)
                if score is not None:
                    tried[change] = score
            self.budget.made += 1
            if score is None:  # what its step takes at least rejects it (see _judge)
                accepted = False
            else:
                energy = score.energy
                delta = (energy - current_energy) / base
                if delta < -PLATEAU:
                    accepted = True
                elif temperature == 0.0:
                    accepted = False
                elif delta <= PLATEAU:
                    accepted = self.rng.random() < temperature / self.t_start
                else:
                    accepted = (self.rng.random() if draw is None else draw) < math.exp(-delta / temperature)
            self.accepted.append(accepted)
            self.made_at.append(fraction)
            if accepted:
                self.by_move[label] = self.by_move.get(label, 0) + 1
                current, current_score, current_energy = candidate, score, energy
                self._offer(current, score)
                tried = {}
            if self.progress is not None and fraction >= next_report:
                self.progress(fraction, self.best_score.step_time)
                next_report = fraction + 1.0 / PROGRESS_UPDATES

    def stats(self):
        """Moves tried and accepted, and the acceptance over the moves of the first and the last tenth of the
        search's budget (from the first move: set-up and calibration left out), where the schedule sets the
        temperature: by moves, the first and the last tenth of the moves; by seconds, of the seconds (moves tried
        again from one strategy, which cost no simulation, crowd the end of a search)."""
        accepted, made_at = self.accepted, self.made_at
        start = end = None
        if accepted:
            window = ACCEPTANCE_WINDOW * (1.0 - made_at[0])
            first = [a for a, f in zip(accepted, made_at) if f < made_at[0] + window] or accepted[:1]
            last = [a for a, f in zip(accepted, made_at) if f >= 1.0 - window] or accepted[-1:]
            start, end = sum(first) / len(first), sum(last) / len(last)
        return {
            "moves_tried": len(accepted),
            "moves_accepted": sum(accepted),
            "evaluations": self.evaluations,
            "acceptance_start": start,
            "acceptance_end": end,
            "temperature_start": self.t_start,
            "temperature_end": self.t_end,
            "accepted_by_move": dict(sorted(self.by_move.items())),
        }


def _named_as_run(strategy, resource_spec):
    """``strategy`` with its buckets named by the algorithm that sums them: where an algorithm cannot differ from
    the ring on the strategy's replicas (autodist.collective_stages.distinct_algorithms: one node, or one replica
    per node) the runtime runs the ring, and the plan says so.  Buckets that only their algorithm told apart (one
    number, two algorithms: two collectives as searched) keep apart, numbered in the order they are issued, so
    that the plan runs the collectives the search priced."""
    offered, _ = distinct_algorithms([resource_spec.device(r[0]).node for r in strategy.replicas])
    allreduced = {name: s for name, s in strategy.sync.items() if s.method == "allreduce"}
    if all(s.algorithm in offered for s in allreduced.values()):
        return strategy
    number = {key: i for i, key in enumerate(sorted({(s.bucket, s.algorithm) for s in allreduced.values()}))}
    return replace(strategy, sync={**strategy.sync, **{
        name: replace(s, algorithm=s.algorithm if s.algorithm in offered else "ring",
                      bucket=number[(s.bucket, s.algorithm)]) for name, s in allreduced.items()}})


def _starts(candidates):
    """The candidates' distinct strategies, best first (ties by name)."""
    out = []
    for c in sorted(candidates, key=lambda c: (_rank(Score.of(c.simulation)), c.name)):
        if c.strategy not in out:
            out.append(c.strategy)
    return out


def optimize(graph_item, resource_spec, cost_model, seed=0, budget_s=10.0, moves=None, progress=None,
             allreduce_only=False, allow_compression=False, allow_micro_batches=False):
    """Search a placement for ``graph_item`` on ``resource_spec``.

    Parameters
    ----------
    graph_item : autodist.graph.item.GraphItem
    resource_spec : autodist.resource_spec.ResourceSpec
    cost_model : cost_models.CostModel
    seed : int
        Seeds every random choice.
    budget_s : float
        Seconds of wall clock for the whole call, set-up and baselines
        included (ignored when ``moves`` is given).
    moves : int, optional
        Make exactly this many moves instead: same inputs and seed give the
        same strategy on any machine.
    progress : callable, optional
        ``progress(fraction_done, best_step_time_seconds)``, called about 100
        times (the CLI draws its bar with it).
    allreduce_only : bool
        Search only strategies that allreduce every variable, one device per
        replica; always so for a job whose ``why_collective_only()`` says why
        (a custom training loop, see :mod:`launcher.runtime.collective`), and
        the result's ``stats["left_out"]`` says it.
    allow_compression : bool
        Let buckets send their gradients as fp16 or bf16 (lossy: opt in).
    allow_micro_batches : bool
        Let the search change how many micro-batches each step accumulates
        (the global batch stays; memory and overlap change).

    Returns
    -------
    SearchResult
    """
    budget = Budget(time.perf_counter(), seconds=None if moves is not None else budget_s, moves=moves)
    collective_only = graph_item.job.why_collective_only()
    allreduce_only = allreduce_only or collective_only is not None
    problem = Problem(graph_item, resource_spec, cost_model)
    simulator = Simulator(problem)
    candidates = all_baselines(simulator, trace=True)  # with their timelines, which the report reads
    if allreduce_only:
        candidates = [c for c in candidates if c.strategy.allreduces_everything()]
    starts = _starts(candidates)
    bound = lower_bound(problem, replicas=starts[0].replicas, group_slots=starts[0].group_slots)
    # kept for the final simulation with its timeline: as long as the best baseline's took
    budget.reserve = next(c.seconds for c in candidates if c.strategy == starts[0])
    space = StrategySpace(problem, random.Random(seed), allow_ps=not allreduce_only,
                          compressions=COMPRESSIONS if allow_compression else ("none",),
                          allow_micro_batches=allow_micro_batches)
    annealer = Annealer(simulator, space, random.Random(seed + 1), budget, progress)
    setup_s = time.perf_counter() - budget.started
    searching = time.perf_counter()
    if problem.dense_bytes and not budget.spent():
        best = annealer.run(starts)[0]
    else:
        best = copy_strategy(starts[0])
    searching = time.perf_counter() - searching
    best = _named_as_run(best, resource_spec)
    warning = None
    if problem.dense_bytes and not annealer.accepted:
        rest = ", calibrating the temperature the rest" if setup_s < budget_s else ""
        warning = (f"the search made no move: set-up and the baselines took {setup_s:.1f} s of the {budget_s:g} s "
                   f"budget{rest}; the plan is the best baseline (a larger budget lets it search)")
    # one simulation of the plan, with its timeline: a baseline's own where the search kept it
    final = next((c.simulation for c in candidates if c.strategy == best), None)
    if final is None:
        final = simulator.simulate(best, trace=True)
    if (best.replicas, best.group_slots) != (starts[0].replicas, starts[0].group_slots):
        bound = lower_bound(problem, replicas=best.replicas, group_slots=best.group_slots)
    stats = annealer.stats()
    stats.update(
        seconds=time.perf_counter() - budget.started,
        setup_seconds=setup_s,
        search_seconds=searching,
        budget_s=None if moves is not None else budget_s,
        moves=moves,
        start=min(candidates, key=lambda c: (_rank(Score.of(c.simulation)), c.name)).name,
        allreduce_only=allreduce_only,
        left_out=f"PS and hybrid plans: {collective_only}" if collective_only else None,
        allow_compression=allow_compression,
        allow_micro_batches=allow_micro_batches,
    )
    if warning:
        stats["warning"] = warning
    return SearchResult(best, final, candidates, bound, stats, simulator)
