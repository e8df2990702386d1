"""The runtime's side of a custom loop's ``tf.function`` step (:mod:`autodist.loops.function`): each replica
runs the step on its own batch and sums gradients with the others; a single client refuses it."""

from __future__ import annotations

import time

from autodist.errors import LaunchError
from autodist.loops import function
from launcher.runtime import phases
from launcher.runtime.collective import batch_mismatch_is_a_launch_error
from launcher.runtime.fit import check_global_batch, global_batch_rows

NAME = function.NAME


class _ReplicaSteps:
    """The training steps of a collective run's replica: each traced once as the replica's step."""

    def __init__(self, run):
        self.run = run
        self._traced = {}  # id of a custom loop's step -> (the step, its replica's tf.function)

    @property
    def first(self):
        return self.run.first

    @property
    def rank(self):
        return self.run.group.rank

    @property
    def count(self):
        return self.run.group.size

    def call_step(self, step, args, kwargs):
        """One call of a custom loop's step: traced once, first call checks data and broadcasts weights."""
        import tensorflow as tf

        run, group = self.run, self.run.group
        traced = self._traced.get(id(step), (None, None))[1]
        if traced is None:
            function.refuse_unbatched(step, args, kwargs, run.call_site(), LaunchError)
            if group.layout.rebatched:
                raise LaunchError(f"the plan's global batch is {group.layout.batch_size} (--global-batch) and "
                                  "a custom loop's step gets the script's own batches, which autodist run cannot "
                                  "re-cut; use --batch-per-replica or the script's batch", field="--global-batch")
            if run.steps:
                run.plan_phase(phases.step_layout(group.layout, run.plan_path, step, args, kwargs, run.call_site()))
            check_global_batch(group.layout, global_batch_rows((args, kwargs)))
            if group.layout.per_replica:
                _check_own_batches(group, (args, kwargs), run.call_site())
            traced = tf.function(group.replica_step(step.python_function), **self._step_options(step))
            traced.get_concrete_function(*args, **kwargs)
            group.broadcast_from_first(group.variables.values())
            self._traced[id(step)] = (step, traced)
        start = time.perf_counter()
        with batch_mismatch_is_a_launch_error():
            out = traced(*args, **kwargs)
        run.count(out, time.perf_counter() - start, run.samples(global_batch_rows((args, kwargs))))
        return out

    def _step_options(self, step):
        """``tf.function`` options of a custom loop's replica step: the script's, compiled as the plan priced it."""
        from autodist.hooks import step_options

        group = self.run.group
        return dict(step_options(step), jit_compile=group.layout.jit_compile(group.device_type))


def _check_own_batches(group, batch, site):
    """Raise LaunchError where another replica got the first's batch for the step called at ``site``: every
    replica runs the script's batch (``--batch-per-replica``) and a custom loop reads the script's data itself,
    so replicas that read the same data would train on copies of one batch."""
    copies = group.copies_of_first(batch)
    if copies:
        raise LaunchError(f"under --batch-per-replica every replica runs its own batch, and the custom loop's step "
                          f"({site}) got the same batch on {copies + 1} of {group.size} replicas, which would train "
                          "on copies of it; give each replica its own data, as with Horovod: "
                          "dataset.shard(autodist.replica_count(), autodist.replica_rank())", field="data")


class RefusedSteps:
    """Custom-loop steps under a one-client plan: refused, naming why (not trained undistributed)."""

    first, rank, count = True, 0, 1

    def __init__(self, reason):
        self.reason = reason

    def call_step(self, step, args, kwargs):
        raise LaunchError(f"custom training loops run only under plans that allreduce every "
                          f"variable, one device per replica, and this plan does not: {self.reason}; "
                          "train with model.fit, or make such a plan (autodist plan --allreduce-only)",
                          field="strategy.sync")


def replica(run):
    """Inside: the script's training step runs as ``run``'s replica step."""
    return function.steps_run_by(_ReplicaSteps(run))


def one_client(client):
    """Inside: the script's training step is refused, saying why the plan does not run on collectives."""
    return function.steps_run_by(RefusedSteps(client.not_collective))
