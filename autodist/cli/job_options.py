"""Options that change the job itself: its precision, its gradient accumulation, and the changes the search may make."""

from __future__ import annotations


def add_job_arguments(parser):
    """Add ``--precision``, ``--micro-batches`` and ``--xla`` (each defaults to what the capture recorded)."""
    from autodist.graph.xla import XLA_CHOICES
    from cost_models.gpu import PRECISIONS

    group = parser.add_argument_group("job (default: as captured)")
    group.add_argument("--precision", choices=PRECISIONS,
                       help="compute precision to plan for: fp32, tf32 (float32 on TF32 tensor cores), "
                            "fp16 or bf16 (Keras mixed precision)")
    group.add_argument("--micro-batches", type=_positive_int, metavar="N",
                       help="cut each replica's share of a step's batch into N micro-batches and accumulate "
                            "their gradients before one update")
    group.add_argument("--xla", choices=XLA_CHOICES,
                       help="compile the step with XLA: auto (as Keras' default jit_compile='auto' does on the "
                            "plan's devices: on GPUs, unless a layer does not support it), on, or off")
    allowed = parser.add_argument_group("changes the search may make to the job (default: none)")
    allowed.add_argument("--allow-compression", action="store_true",
                         help="let allreduce buckets send their gradients as fp16 or bf16 (half the bytes, "
                              "rounded gradients)")
    allowed.add_argument("--allow-micro-batches", action="store_true",
                         help="let the search change how many micro-batches each step accumulates (same global "
                              "batch and weights; less memory, later gradients)")


def _positive_int(text):
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def job_options(args):
    """The job overrides given on the command line, as keyword arguments of ``autodist.api.with_job_options``."""
    return {"precision": getattr(args, "precision", None), "micro_batches": getattr(args, "micro_batches", None),
            "xla": getattr(args, "xla", None)}


def search_allowances(args):
    """The changes to the job the search may make, as keyword arguments of ``autodist.api.make_plan``."""
    return {"allow_compression": bool(getattr(args, "allow_compression", False)),
            "allow_micro_batches": bool(getattr(args, "allow_micro_batches", False))}
