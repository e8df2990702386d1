"""The job options a user overrides for planning: ``--precision``, ``--micro-batches`` and ``--xla``."""

from __future__ import annotations

from autodist.errors import InputError
from autodist.graph.xla import XLA_CHOICES

# The compute precisions a job is planned at (cost_models.gpu prices each).
PRECISIONS = ("fp32", "tf32", "fp16", "bf16")
# TensorFlow's switches (environment variables) that decide which fused kernels Grappler's remapper runs on a
# GPU (cost_models.gpu_remapper); capture records the ones the script's process turned on (JobInfo.gpu_env).
CUBLASLT = "TF_USE_CUBLASLT"
BATCHNORM_PERSISTENT = "TF_USE_CUDNN_BATCHNORM_SPATIAL_PERSISTENT"
GPU_ENV = (CUBLASLT, BATCHNORM_PERSISTENT)


def gpu_env(environ):
    """The :data:`GPU_ENV` switches ``environ`` turns on, as TensorFlow reads them ("1" or "true", any case)."""
    return [name for name in GPU_ENV if environ.get(name, "").strip().lower() in ("1", "true")]


def with_job_options(graph_item, precision=None, micro_batches=None, xla=None):
    """``graph_item`` with its job's precision, micro-batch count and XLA setting overridden where given.

    ``precision`` is one of "fp32", "tf32", "fp16", "bf16" (a float32 job run
    at fp16/bf16 is priced as Keras mixed precision runs it: half-precision
    compute and activations, float32 variables and gradients);
    ``micro_batches`` the micro-batches whose gradients are accumulated
    before one update; ``xla`` one of "auto" (as Keras' default
    ``jit_compile="auto"`` resolves it on the plan's devices), "on", "off"
    (autodist.graph.xla).
    """
    if xla is not None:
        if xla not in XLA_CHOICES:
            raise InputError(f"unknown XLA setting {xla!r} (one of {', '.join(XLA_CHOICES)})", field="--xla")
        graph_item.job.jit_compile = xla

    if precision is not None:
        if precision not in PRECISIONS:
            raise InputError(f"unknown precision {precision!r} (one of {', '.join(PRECISIONS)})", field="--precision")
        graph_item.job.precision = precision
    if micro_batches is not None:
        if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
            raise InputError(f"must be a positive integer, got {micro_batches!r}", field="--micro-batches")
        graph_item.job.micro_batches = micro_batches
    return graph_item
