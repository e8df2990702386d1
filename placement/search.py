"""Simulated-annealing search over strategies, starting from the best baseline.

The annealer is a ``simanneal.Annealer`` whose loop is our own, for two
reasons: simanneal draws acceptance from the global ``random`` module (we
need one seeded ``random.Random``), and it counts steps where we need a time
budget.  The budget is made deterministic: ``budget_s`` converts to *work
units* (events the simulator processes, see ``Simulator.work``, counted from
the baselines on) at
``WORK_PER_SECOND``, measured on the 2-core reference machine
(benchmarks/results/placement.md), so the same inputs and seed give the same
plan on any machine; a wall-clock guard at ``CLOCK_GUARD * budget_s + CLOCK_GRACE`` seconds stops a
run on a much slower or busier machine (``stats["stopped_by_clock"]`` then
says so).

Temperature: energies are step times relative to the start; ``Tmax`` makes
the mean uphill delta of sampled moves accepted half the time and the
schedule cools exponentially to ``Tmax / 1000`` as the work budget is spent.
The best strategy seen (fitting memory first, then fastest) is returned, and
the search starts from the best baseline, so it never returns anything worse.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field

import simanneal

from autodist.strategy import COMPRESSIONS
from placement.baselines import all_baselines
from placement.bounds import lower_bound
from placement.simulator import Simulator
from placement.space import StrategySpace, copy_strategy

WORK_PER_SECOND = 40_000
CLOCK_GUARD = 3.0
CLOCK_GRACE = 10.0
SAMPLE_MOVES = 24
COOLING_RATIO = 1e-3
MEMORY_PENALTY = 10.0
PROGRESS_UPDATES = 100


@dataclass
class SearchResult:
    """The chosen strategy, its simulation, every baseline and search statistics."""

    strategy: object
    simulation: object
    candidates: list
    lower_bound: float
    stats: dict = field(default_factory=dict)

    def baseline(self, name):
        return next(c for c in self.candidates if c.name == name)


def energy_of(simulation):
    """Step time of the global batch, penalised by the worst relative memory excess."""
    excess = 0.0
    for device, extra in simulation.over_memory.items():
        excess = max(excess, extra / max(simulation.memory_limit[device], 1))
    return simulation.step_time * (1.0 + MEMORY_PENALTY * excess)


def _rank(simulation):
    return (not simulation.fits, energy_of(simulation))


class PlacementAnnealer(simanneal.Annealer):
    """Anneals a Strategy with :class:`~placement.space.StrategySpace` moves.

    ``simanneal.Annealer.__init__`` is not called: it installs a SIGINT
    handler, a process-wide side effect a library must not have.
    """

    def __init__(self, strategy, simulator, space, rng, work_budget, deadline, progress=None):
        self.state = copy_strategy(strategy)
        self.simulator = simulator
        self.space = space
        self.rng = rng
        self.work_budget = work_budget
        self.deadline = deadline
        self.progress = progress
        self.stats = {"moves_tried": 0, "moves_accepted": 0, "moves_improving": 0, "stopped_by_clock": False}
        self.by_move = {}

    def copy_state(self, state):
        return copy_strategy(state)

    def move(self):
        return self.space.move(self.state)

    def energy(self):
        self.last_simulation = self.simulator.simulate(self.state)
        return energy_of(self.last_simulation)

    def _spent(self):
        return self.simulator.work / self.work_budget

    def _out_of_time(self):
        if time.perf_counter() > self.deadline:
            self.stats["stopped_by_clock"] = True
            return True
        return self._spent() >= 1.0

    def calibrate(self, base_energy):
        """Set Tmax/Tmin from the energy deltas of moves sampled around the start."""
        uphill = []
        for _ in range(SAMPLE_MOVES):
            if self._out_of_time():
                break
            saved = self.copy_state(self.state)
            self.move()
            delta = self.energy() / base_energy - 1.0
            if delta > 0:
                uphill.append(delta)
            self.state = saved
        tmax = (sum(uphill) / len(uphill) if uphill else 1e-3) / math.log(2.0)
        self.set_schedule({"tmax": tmax, "tmin": tmax * COOLING_RATIO, "steps": 0, "updates": PROGRESS_UPDATES})

    def update(self, step, T, E, acceptance, improvement):
        if self.progress is not None:
            self.progress(min(1.0, self._spent()), E)

    def anneal(self):
        """Run until the work budget is spent; return (best state, best simulation)."""
        current = self.copy_state(self.state)
        current_energy = self.energy()
        base = current_energy
        best, best_sim = self.copy_state(current), self.last_simulation
        self.calibrate(base)
        next_report = 0.0
        while not self._out_of_time():
            fraction = self._spent()
            temperature = self.Tmax * (self.Tmin / self.Tmax) ** fraction
            self.state = self.copy_state(current)
            label = self.move()
            candidate_energy = self.energy()
            self.stats["moves_tried"] += 1
            delta = (candidate_energy - current_energy) / base
            if delta <= 0 or self.rng.random() < math.exp(-delta / temperature):
                self.stats["moves_accepted"] += 1
                self.by_move[label] = self.by_move.get(label, 0) + 1
                if delta < 0:
                    self.stats["moves_improving"] += 1
                current, current_energy = self.state, candidate_energy
                if _rank(self.last_simulation) < _rank(best_sim):
                    best, best_sim = self.copy_state(current), self.last_simulation
            if fraction >= next_report:
                self.update(self.stats["moves_tried"], temperature, best_sim.step_time, None, None)
                next_report = fraction + 1.0 / self.updates
        self.update(self.stats["moves_tried"], self.Tmin, best_sim.step_time, None, None)
        self.state = best
        return best, best_sim


def optimize(graph_item, resource_spec, cost_model, seed=0, budget_s=10.0, progress=None, allreduce_only=False,
             allow_compression=False, allow_micro_batches=False):
    """Search a placement for ``graph_item`` on ``resource_spec``.

    Parameters
    ----------
    graph_item : autodist.graph.item.GraphItem
    resource_spec : autodist.resource_spec.ResourceSpec
    cost_model : cost_models.CostModel
    seed : int
        Seeds every random choice; same inputs and seed give the same strategy.
    budget_s : float
        Search budget in seconds on the reference machine (see module doc).
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
    started = time.perf_counter()
    collective_only = graph_item.job.why_collective_only()
    allreduce_only = allreduce_only or collective_only is not None
    simulator = Simulator(graph_item, resource_spec, cost_model)
    candidates = all_baselines(simulator)
    if allreduce_only:
        candidates = [c for c in candidates if c.strategy.allreduces_everything()]
    start = min(candidates, key=lambda c: _rank(c.simulation))
    space = StrategySpace(simulator, random.Random(seed), allow_ps=not allreduce_only,
                          compressions=COMPRESSIONS if allow_compression else ("none",),
                          allow_micro_batches=allow_micro_batches)
    annealer = PlacementAnnealer(
        start.strategy,
        simulator,
        space,
        rng=random.Random(seed + 1),
        work_budget=max(1.0, budget_s * WORK_PER_SECOND),
        deadline=started + CLOCK_GUARD * budget_s + CLOCK_GRACE,
        progress=progress,
    )
    best = annealer.anneal()[0] if simulator.dense_bytes else copy_strategy(start.strategy)
    final = simulator.simulate(best, trace=True)
    bound = lower_bound(
        graph_item, resource_spec, cost_model, replicas=best.replicas, group_slots=best.group_slots, simulator=simulator
    )
    stats = dict(annealer.stats)
    stats.update(
        seconds=time.perf_counter() - started,
        work=simulator.work,
        start=start.name,
        allreduce_only=allreduce_only,
        left_out=f"PS and hybrid plans: {collective_only}" if collective_only else None,
        allow_compression=allow_compression,
        allow_micro_batches=allow_micro_batches,
        accepted_by_move=dict(sorted(annealer.by_move.items())),
    )
    return SearchResult(best, final, candidates, bound, stats)
