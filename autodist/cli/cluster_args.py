"""Every command gets its cluster the same way.

:func:`add_cluster_arguments` adds ``--cluster FILE | --preset NAME[:N] |
--from-kubernetes [--selector S]`` to a parser and :func:`cluster_from_args`
turns the parsed arguments into a :class:`~autodist.resource_spec.ResourceSpec`
through :func:`~autodist.resource_spec.load_cluster`.
"""

from autodist.resource_spec import load_cluster


def add_cluster_arguments(parser, positional=False):
    """Add the cluster source options to an argparse parser.

    Parameters
    ----------
    parser : argparse.ArgumentParser
    positional : bool
        Also accept the cluster file as an optional positional argument
        (``autodist cluster show cluster.yaml``).
    """
    from autodist.resource_spec.emulated import EMULATED_RATES
    from autodist.resource_spec.presets import MACHINES

    group = parser.add_argument_group("cluster (exactly one)")
    sources = group.add_mutually_exclusive_group()
    if positional:
        sources.add_argument("cluster", nargs="?", metavar="CLUSTER_FILE", help="cluster.yaml")
    else:
        sources.add_argument("--cluster", metavar="FILE", help="cluster.yaml (or a resource spec JSON)")
    sources.add_argument(
        "--preset",
        metavar="NAME[:N]",
        help=f"N nodes of a machine preset ({', '.join(MACHINES)}), 'local' (this machine) or N nodes emulated on "
             f"this machine ({', '.join(EMULATED_RATES)}), e.g. dgx-h100:4",
    )
    sources.add_argument(
        "--from-kubernetes", action="store_true", help="read the nodes of the current Kubernetes context"
    )
    group.add_argument("--selector", metavar="S", help="Kubernetes label selector (with --from-kubernetes)")
    group.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (with --from-kubernetes)")


def cluster_from_args(args, prog="autodist"):
    """The :class:`ResourceSpec` named by arguments from :func:`add_cluster_arguments`.

    Discovery warnings (guessed or unknown figures) go to stderr as one line
    each, ``<prog>: warning: ...``.
    """
    import sys
    import warnings

    from autodist.resource_spec.discovery import DiscoveryWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DiscoveryWarning)
        spec = load_cluster(
            path=getattr(args, "cluster", None),
            preset=getattr(args, "preset", None),
            from_kubernetes=getattr(args, "from_kubernetes", False),
            label_selector=getattr(args, "selector", None),
            kubeconfig=getattr(args, "kubeconfig", None),
        )
    for warning in caught:
        if issubclass(warning.category, DiscoveryWarning):
            print(f"{prog}: warning: {warning.message}", file=sys.stderr)
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    return spec
