"""Weak scaling: a data-parallel step against one device running one replica's share of the batch alone.

The efficiency published scaling figures state, and the one ``placement
report`` prints: the throughput of ``n`` replicas over ``n`` times the
throughput of one device of the same model running one replica's batch on
its own (its node's CPUs beside it, no other GPU, no NIC), priced by the
same simulator as a one-device cluster: what ``placement report`` prints for
the job at that batch on a one-GPU cluster file, and what ``costmodel eval``
divides by (cost_models.fitting.cluster_published).
"""

from __future__ import annotations

from autodist.graph.semantics import one_replica
from autodist.throughput import samples_per_second
from placement.baselines import AllreducePricer


def one_device_step(graph_item, replicas, resource_spec, device, cost_model):
    """Seconds of one step of ``graph_item``'s share for one of ``replicas`` replicas (:func:`one_replica`) on
    ``device`` of ``resource_spec`` alone (``ResourceSpec.alone``)."""
    return AllreducePricer(one_replica(graph_item, replicas), resource_spec.alone(device), cost_model).seconds()


def one_device(problem, replica_devices):
    """One device of the model of ``replica_devices`` (one device name per replica of a data-parallel step of
    ``problem``'s job) running one replica's share alone, as a dict: the device model, the replicas, one replica's
    batch, the device's step and throughput.  None for fewer than two replicas, replicas on devices of different
    models, or a batch not known."""
    spec = problem.resource_spec
    models = {spec.device(d).model for d in replica_devices}
    replicas = len(replica_devices)
    item = problem.graph_item
    if replicas < 2 or len(models) != 1 or item.job.batch_size <= 0:
        return None
    step = one_device_step(item, replicas, spec, replica_devices[0], problem.cost_model)
    batch = one_replica(item, replicas).job.batch_size
    return {"device": models.pop(), "replicas": replicas, "replica_batch": batch, "one_device_step_time": step,
            "one_device_samples_per_s": samples_per_second(batch, step)}


def weak_scaling(alone, samples_per_s):
    """``alone`` (:func:`one_device`) with the speedup of a step at ``samples_per_s`` over the one device and the
    efficiency (speedup / replicas); None where either is unknown."""
    if alone is None or not alone["one_device_samples_per_s"] or not samples_per_s:
        return None
    speedup = samples_per_s / alone["one_device_samples_per_s"]
    return {**alone, "speedup": speedup, "efficiency": speedup / alone["replicas"]}
