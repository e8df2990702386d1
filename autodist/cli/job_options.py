"""Options that change the job itself: its precision, its gradient accumulation, and the changes the search may make."""

from __future__ import annotations


def add_job_arguments(parser):
    """Add ``--precision``, ``--micro-batches`` and ``--xla`` (each defaults to what the capture recorded)."""
    from autodist.graph.xla import XLA_CHOICES
    from autodist.graph.job_options import PRECISIONS

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
    batch = parser.add_argument_group("batch semantics (default: the script's batch is the global batch, split among "
                                      "the replicas)")
    batch.add_argument("--global-batch", type=_positive_int, metavar="N",
                       help="plan the job at this global batch instead of the script's (the same script on a larger "
                            "cluster: weak scaling)")
    batch.add_argument("--batch-per-replica", action="store_true",
                       help="every replica runs the script's batch, one replica per compute device (Horovod's "
                            "semantics: the global batch is replicas x batch); a step that pins its batch in a "
                            "shape gets it anyway")
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
    """The job overrides given on the command line, as keyword arguments of ``autodist.graph.job_options.with_job_options``."""
    return {"precision": getattr(args, "precision", None), "micro_batches": getattr(args, "micro_batches", None),
            "xla": getattr(args, "xla", None)}


def batch_options(args):
    """The batch semantics given on the command line, as keyword arguments of ``autodist.api.make_plan``."""
    return {"global_batch": getattr(args, "global_batch", None),
            "batch_per_replica": bool(getattr(args, "batch_per_replica", False))}


def check_no_batch_options(args, plan_path):
    """Refuse batch options with a plan made already (its batch is fixed)."""
    from autodist.errors import InputError

    for option, given in (("--global-batch", getattr(args, "global_batch", None)),
                          ("--batch-per-replica", getattr(args, "batch_per_replica", False))):
        if given:
            raise InputError(f"{plan_path} was planned at its batch already; give the script (or graph) to plan "
                             f"it with {option}", field=option)


def search_allowances(args):
    """The changes to the job the search may make, as keyword arguments of ``autodist.api.make_plan``."""
    return {"allow_compression": bool(getattr(args, "allow_compression", False)),
            "allow_micro_batches": bool(getattr(args, "allow_micro_batches", False))}
