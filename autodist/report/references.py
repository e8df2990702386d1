"""The job priced as other systems run it on the same cluster, beside autodist's plan and baselines.

Published comparisons are made against these systems, which autodist's
runtime does not run (placement.baselines prices each): Horovod's ring
allreduce, TensorFlow 1's distributed parameter servers and AutoDist's
(petuum/autodist) PartitionedPS; and what a script written for TensorFlow 2's
MultiWorkerMirroredStrategy runs without autodist (its default communication).
"""

from __future__ import annotations

from autodist.throughput import samples_per_second

# (name, what the system does, the placement.baselines function that prices it)
SYSTEMS = (
    ("horovod", "Horovod: every dense gradient ring-allreduced and every sparse one gathered, at Horovod's cost "
                "per fused collective", "horovod_step"),
    ("tensorflow-ps", "TensorFlow 1's PS: every GPU pushes its own gradient and reads the variables itself",
     "tensorflow_ps_step"),
    ("autodist-ps", "AutoDist's PartitionedPS: a sum per node, each shard pulled back once it is updated",
     "autodist_ps_step"),
    ("tensorflow-mwms", "TensorFlow 2's MultiWorkerMirroredStrategy as configured by default: no XLA (Keras' "
                        "jit_compile='auto' under a strategy), every gradient in one tensor after the backward pass, "
                        "summed by TensorFlow's own ring over gRPC",
     "mwms_step"),
)


def reference_steps(pricing, problem, batch_size, plan_step):
    """One entry per system of :data:`SYSTEMS`: its simulated step of ``problem``, its throughput against the
    plan's ``plan_step``, and its weak scaling (every system runs a replica per compute device, as the ``ring``
    baseline; ``pricing``: the report's autodist.report.pricing.Pricing of ``problem``)."""
    from placement import baselines

    ring = baselines.named("ring").build(problem)
    out = []
    for name, system, pricer in SYSTEMS:
        step = getattr(baselines, pricer)(problem).step_time
        samples_per_s = samples_per_second(batch_size, step)
        out.append({"name": name, "system": system, "step_time": step, "samples_per_s": samples_per_s,
                    "throughput_vs_plan": plan_step / step,
                    "scaling": pricing.weak_scaling(ring, samples_per_s) if pricing else None})
    return out
