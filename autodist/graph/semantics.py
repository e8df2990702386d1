"""Batch semantics: which global batch a data-parallel plan trains on, and why.

- the default: the script's batch is the global batch, split among the
  replicas (the search may choose how many);
- ``global_batch``: the same, at another global batch (weak scaling to a
  larger cluster without editing the script; the step is re-priced by
  :func:`autodist.graph.rebatch.at_batch`);
- ``per_replica``: Horovod's semantics: every replica runs the script's own
  batch, so the global batch is replicas x that batch.  The global batch is
  part of the training, so the plan keeps one replica per compute device
  (the search does not change their count).  It is the only data-parallel
  semantics a step whose graph pins its batch in a shape can run under
  (``JobInfo.batch_pinned``), and such a step gets it whatever was asked.
"""

from __future__ import annotations

from dataclasses import replace

from autodist.errors import InputError
from autodist.graph.item import GraphItem
from autodist.graph.rebatch import at_batch


def planned_batch(graph_item, devices, global_batch=None, per_replica=False):
    """``graph_item`` at the global batch its plan trains on (a new item; ``graph_item`` is unchanged).

    Parameters
    ----------
    graph_item : GraphItem
        The step at the script's batch.
    devices : int
        Compute devices of the cluster (the replicas under ``per_replica``).
    global_batch : int, optional
        Plan at this global batch instead of the script's.
    per_replica : bool
        Every replica runs the script's batch.

    Raises InputError where the options conflict with each other or with a
    step that pins its batch.
    """
    job = graph_item.job
    batch = job.batch_size
    if global_batch is not None and per_replica:
        raise InputError("give one batch semantics: --global-batch N or --batch-per-replica", field="--global-batch")
    if global_batch is not None and job.batch_pinned and global_batch != batch:
        raise InputError(f"the step pins its batch of {batch} in a shape ({job.batch_pinned}), so it cannot be planned "
                         "at another global batch; use --batch-per-replica (every replica runs the script's batch)",
                         field="--global-batch")
    if (per_replica or job.batch_pinned) and devices > 1 and batch > 0:
        item = at_batch(graph_item, batch * devices)
        fields = {"batch_per_replica": True, "script_batch": batch}
    elif global_batch is not None and global_batch != batch:
        item = at_batch(graph_item, global_batch)
        fields = {"script_batch": batch}
    else:
        item, fields = graph_item, {}
    return GraphItem(list(item.ops.values()), list(item.variables.values()), replace(item.job, **fields),
                     item.loops.values())


def one_replica(graph_item, replicas):
    """What one replica of a data-parallel plan of ``graph_item`` (the step at its global batch) over ``replicas``
    replicas runs, as one device alone runs it: the largest share of the global batch, all of its micro-batches
    (the denominator of weak scaling)."""
    return at_batch(graph_item, -(-graph_item.job.batch_size // max(replicas, 1)))


def replica_limit(batch_size, micro_batches, devices, per_replica=False):
    """The most one-device replicas a job can run on ``devices`` compute devices: one per device, and where the
    replicas share the global batch of ``batch_size``, at most one per sample of each of ``micro_batches`` (a
    replica without a sample trains on nothing); a batch not known (0, a graph built by hand) limits nothing."""
    if per_replica or batch_size < 1:
        return devices
    return max(1, min(devices, batch_size // max(micro_batches, 1)))


def describe(batch_size, script_batch=0, per_replica=False, pinned="", devices=0, micro_batches=1):
    """One sentence: the global batch a plan trains on and why (the fields of a plan's ``graph`` summary), and
    where it has fewer samples per micro-batch than the cluster has ``devices`` (compute devices), how many of
    them can take a replica."""
    script_batch = script_batch or batch_size
    if per_replica:
        why = (f", as the step pins its batch in a shape, which cannot be split among replicas: {pinned}" if pinned
               else " (--batch-per-replica)")
        return (f"every replica runs the script's batch of {script_batch}: the global batch is "
                f"{batch_size // script_batch} x {script_batch} = {batch_size}{why}")
    most = replica_limit(batch_size, micro_batches, devices)
    cap = (f": at most {most} of the cluster's {devices} compute devices can take a replica, one sample each"
           f"{' per micro-batch' if micro_batches > 1 else ''}" if most < devices else "")
    if script_batch != batch_size:
        return (f"the global batch is {batch_size} (--global-batch; the script's is {script_batch}), split among "
                f"the replicas{cap}")
    return f"the script's batch of {batch_size} is the global batch, split among the replicas{cap}"
