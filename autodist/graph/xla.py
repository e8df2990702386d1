"""Whether a job's step runs compiled by XLA on the device it is priced for.

A job records what its script asked for (``JobInfo.jit_compile``): "on",
"off", or "auto", Keras 3's default ``model.compile(jit_compile="auto")``.
Keras resolves "auto" when the model is compiled, on the host that runs it
(``Trainer._resolve_auto_jit_compile`` in keras/src/trainers/trainer.py,
Keras 3.15): off on a host without an accelerator; off when the model was
built under a ``tf.distribute`` strategy; else on where every layer supports
XLA and op determinism is off (``model_supports_jit``).  Capture runs on a
CPU-only host, where Keras turns it off, so the job keeps "auto" with the
facts the rule needs (``jit_supported``, ``distribute_strategy``,
``cudnn_rnns``: an LSTM or GRU that runs on cuDNN on a GPU makes Keras turn
"auto" off there) and the step is priced as Keras compiles it on the plan's
device.  autodist's runtime replaces a script's ``MirroredStrategy`` (its
replicas run without one) and compiles each replica's step as it was priced
(launcher.runtime).

A plan that one client drives (any PS variable, or a replica over several
devices) runs its step as the client's one ``tf.function``, which nothing
compiles with XLA (launcher.runtime.trainer): such a plan is priced, and
reported, without XLA whatever the job asks (:func:`plan_xla`).  So is a plan
whose replicas on CPUs sum their gradients (more than one replica): XLA
compiles no CPU collective ("Only compiling NCCL/auto collective is
supported, got: ring"), so the runtime runs those replicas' step uncompiled
(launcher.runtime.layout.RunLayout.jit_compile).

``--xla {auto,on,off}`` (``plan``, ``placement report``, ``run``) overrides
what the script asked for (autodist.graph.job_options.with_job_options).
"""

from __future__ import annotations

from dataclasses import dataclass

XLA_CHOICES = ("auto", "on", "off")


@dataclass(frozen=True)
class XlaChoice:
    """Whether the step runs compiled by XLA (``on``) and why, in words for the report."""

    on: bool
    reason: str


def resolve_xla(job, device_kind):
    """The :class:`XlaChoice` of ``job`` (a JobInfo) on a device of ``device_kind`` ("GPU", "CPU", ...)."""
    asked = getattr(job, "jit_compile", "") or ("on" if job.xla else "off")
    if asked == "on":
        return XlaChoice(True, "the job asks for XLA: jit_compile=True, or --xla on")
    if asked == "off":
        return XlaChoice(False, "the job asks for no XLA: jit_compile=False, or --xla off")
    if device_kind == "CPU":
        return XlaChoice(False, "Keras' jit_compile='auto' does not compile with XLA on a CPU-only host")
    if job.distribute_strategy:
        return XlaChoice(False, f"Keras' jit_compile='auto' does not compile with XLA under tf.distribute's "
                                f"{job.distribute_strategy}")
    if not job.jit_supported:
        return XlaChoice(False, "Keras' jit_compile='auto' does not compile with XLA: a layer of the model does not "
                                "support it, or op determinism is on")
    if device_kind == "GPU" and job.cudnn_rnns:
        return XlaChoice(False, f"Keras' jit_compile='auto' does not compile with XLA on a GPU: "
                                f"{', '.join(job.cudnn_rnns)} run on cuDNN there, which XLA does not compile "
                                f"(priced as cuDNN's kernels: per time step the recurrent product and one pointwise "
                                f"kernel, the other products once over the sequence)")
    return XlaChoice(True, f"Keras' jit_compile='auto' compiles the step with XLA on a {device_kind}")


def plan_xla(job, device_kind, one_client, replicas=1):
    """The :class:`XlaChoice` of ``job`` under a plan of ``replicas`` replicas on devices of ``device_kind``:
    :func:`resolve_xla`'s, but off where ``one_client`` (the plan is driven by one client,
    launcher.runtime.trainer, whose step XLA does not compile) and where CPU replicas sum gradients (XLA
    compiles no CPU collective)."""
    choice = resolve_xla(job, device_kind)
    if choice.on and one_client:
        return XlaChoice(False, "the plan's one client (PS variables, or a replica over several devices) runs the "
                                "step as one tf.function that XLA does not compile: priced without XLA, as it runs")
    if choice.on and device_kind == "CPU" and replicas > 1:
        return XlaChoice(False, f"the plan's {replicas} CPU replicas sum their gradients with collectives that XLA "
                                "does not compile on CPUs: their step runs without XLA, and is priced so")
    return choice
