"""A later training phase of a script (another ``model.fit``: another model or batch), planned where it starts.

The plan ``autodist run`` searched is for the script's first phase, the
step it captured.  A later phase keeps the batch semantics of the first
where every replica runs its own batch (its replicas were seeded apart),
and gets them where its own step pins its batch (autodist.graph.semantics).  A later ``model.fit`` (or custom-loop step) whose global batch or
variables are not that plan's is captured where it is called (its step traced, not run)
and planned for the same replicas: every trainable variable allreduced by
ring in one bucket.  The replica group (its processes and collectives)
stays as started, so every replica derives the same plan from the same
step, without talking to the others.  The launcher may import only
autodist's core, so this plan is not priced here (no simulator): its
predicted step time is unknown (0).  A launcher that can price it (``autodist
run``, autodist.cli.run_cmd) names a folder in :data:`PHASES_ENV`: the first
replica keeps each later phase's step and plan there, and at the end the
record of every phase's steps and measured step time (``phases.json``),
instead of printing the closing lines, which that launcher prints with each
phase priced.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from autodist.io import write_json_atomic

# Where the first replica keeps later phases' steps and plans and the phases' record for the launcher to price
# (unset: nothing is kept, and the closing lines say a later phase is not priced).
PHASES_ENV = "AUTODIST_PHASES_DIR"
PHASES_RECORD = "phases.json"


@dataclass(frozen=True)
class Phase:
    """A later phase as planned: its RunLayout, the line that says so, its step (GraphItem) and its Plan."""

    layout: object
    line: str
    item: object
    plan: object


def kept(phase, number):
    """What the record of later phase ``number`` keeps besides its steps: its source and, where
    :data:`PHASES_ENV` names a folder, the files of its step and plan, written there."""
    folder = os.environ.get(PHASES_ENV)
    if not folder:
        return {"source": phase.item.job.source}
    graph, plan = (os.path.join(folder, f"phase-{number}.{what}.json") for what in ("graph", "plan"))
    phase.item.save(graph)
    phase.plan.save(plan)
    return {"source": phase.item.job.source, "graph": graph, "plan": plan}


def close(reporter, plan_path):
    """At the end of a run (its first replica): the phases' record for the launcher that prices them, where
    :data:`PHASES_ENV` names a folder, else the closing lines."""
    folder = os.environ.get(PHASES_ENV)
    if folder:
        write_json_atomic(os.path.join(folder, PHASES_RECORD), {"phases": reporter.phases(plan_path)})
    else:
        reporter.summary(plan_path)


def needs_plan(layout, model, rows, fitted):
    """Whether a ``model.fit`` of ``rows``-sample global batches is not the phase ``layout`` was planned for: another
    batch, a model not built yet (whose variables fit creates), variables the layout does not hold, or another model
    than ``fitted`` (the model the phase's fit trained; None: no fit yet), whose step is another even where its
    variables' names are the same (``keras.models.clone_model`` keeps its layers' names)."""
    if rows and layout.step_rows and rows != layout.step_rows:
        return True
    if fitted is not None and model is not fitted:
        return True
    return not model.built or any(v.path not in layout.variables for v in model.trainable_variables)


def phase_layout(plan_path, model, x, y, batch_size, sample_weight, source):
    """The :class:`Phase` of a later ``model.fit``: its plan on the replicas of the plan at ``plan_path``, and one
    line saying what was planned and how long it took."""
    from autodist.loops import fit

    start = time.perf_counter()
    item = fit.step_item(model, x, y, batch_size, sample_weight, _name(source), source)
    return _planned(plan_path, item, start)


def step_layout(layout, plan_path, step, args, kwargs, source):
    """The :class:`Phase` of a later custom-loop step (a ``tf.function`` that applies gradients) whose batch or
    variables are not ``layout``'s, as :func:`phase_layout`; None when ``layout`` already fits it."""
    from autodist.loops import function

    start = time.perf_counter()
    item = function.step_item(step, args, kwargs, _name(source), source)
    names = [v.name for v in item.trainable_variables()]
    if item.job.batch_size in (0, layout.step_rows) and all(n in layout.variables for n in names):
        return None
    return _planned(plan_path, item, start)


def _name(source):
    return os.path.splitext(os.path.basename(source.rpartition(":")[0] or source))[0]


def _planned(plan_path, item, start):
    """The :class:`Phase` of ``item`` on the replicas of the plan at ``plan_path`` (every variable allreduced by
    ring, not priced)."""
    from autodist.graph.semantics import planned_batch
    from autodist.plan import Plan
    from autodist.strategy import Strategy, VarSync
    from launcher.runtime.layout import RunLayout

    first = Plan.load(plan_path)
    # the replicas were seeded for the first phase's semantics: a run whose replicas each run their own batch keeps it
    item = planned_batch(item, len(first.strategy.replicas), per_replica=bool(first.graph.get("batch_per_replica")))
    sync = {v.name: VarSync("allreduce", algorithm="ring", bucket=0) for v in item.trainable_variables()}
    strategy = Strategy(replicas=first.strategy.replicas, sync=sync, ps_devices=[])
    plan = Plan.from_strategy(item, first.resource_spec, strategy, {"step_time": 0.0}, first.provenance["cost_model_id"],
                              0)
    seconds = time.perf_counter() - start
    line = (f"autodist: a new training phase at {item.job.source} (global batch {item.job.batch_size}"
            f"{', every replica on its own batch' if item.job.batch_per_replica else ''}, "
            f"{len(sync)} trainable variables): planned in {seconds:.1f} s on the same "
            f"{len(strategy.replicas)} replica{'s' if len(strategy.replicas) != 1 else ''}, every variable "
            f"allreduced by ring ({'priced when the run ends' if os.environ.get(PHASES_ENV) else 'not priced'})")
    return Phase(RunLayout.from_plan(plan), line, item, plan)
