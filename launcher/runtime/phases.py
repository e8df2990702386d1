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
autodist's core, so this plan is not priced (no simulator here): its
predicted step time is unknown (0).
"""

from __future__ import annotations

import os
import time


def needs_plan(layout, model, rows):
    """Whether a ``model.fit`` of ``rows``-sample global batches is not the phase ``layout`` was planned for (a model
    not built yet, whose variables fit creates, is not)."""
    if rows and layout.step_rows and rows != layout.step_rows:
        return True
    return not model.built or any(v.path not in layout.variables for v in model.trainable_variables)


def phase_layout(plan_path, model, x, y, batch_size, sample_weight, source):
    """``(RunLayout, line)`` for a later ``model.fit``: its plan on the replicas of the plan at ``plan_path``, and one
    line saying what was planned and how long it took."""
    from autodist.loops import fit

    start = time.perf_counter()
    item = fit.step_item(model, x, y, batch_size, sample_weight, _name(source), source)
    return _planned(plan_path, item, start)


def step_layout(layout, plan_path, step, args, kwargs, source):
    """``(RunLayout, line)`` for a later custom-loop step (a ``tf.function`` that applies gradients) whose batch or
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
    """The plan of ``item`` on the replicas of the plan at ``plan_path`` (every variable allreduced by ring, not
    priced), as a RunLayout, and its line."""
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
            "allreduced by ring (not priced)")
    return RunLayout.from_plan(plan), line
