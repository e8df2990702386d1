"""The cluster model: nodes, devices and links (see spec.py for the names).

Every CLI gets its cluster the same way: :func:`add_cluster_arguments` adds
``--cluster FILE | --preset NAME[:N] | --from-kubernetes [--selector S]`` to a
parser and :func:`cluster_from_args` turns the parsed arguments into a
:class:`ResourceSpec` through :func:`load_cluster`.
"""

from autodist.errors import InputError
from autodist.resource_spec.spec import DeviceSpec, LinkSpec, NodeSpec, Path, ResourceSpec

__all__ = [
    "DeviceSpec",
    "LinkSpec",
    "NodeSpec",
    "Path",
    "ResourceSpec",
    "add_cluster_arguments",
    "cluster_from_args",
    "load_cluster",
]


def load_cluster(path=None, preset=None, from_kubernetes=False, label_selector=None, kubeconfig=None):
    """The cluster from exactly one source.

    Parameters
    ----------
    path : str, optional
        A cluster.yaml file (or a ResourceSpec JSON file).
    preset : str, optional
        ``"NAME"`` or ``"NAME:N"``, e.g. ``"dgx-h100:4"``, ``"cpu-local:2"``,
        or ``"local"`` for this machine.
    from_kubernetes : bool
        Read the nodes of the current Kubernetes context (or in-cluster).
    label_selector : str, optional
        Only the Kubernetes nodes matching this selector.
    kubeconfig : str, optional
        A kubeconfig file instead of the default one.

    Returns
    -------
    ResourceSpec
    """
    given = [s for s, on in (("a cluster file", path), ("a preset", preset), ("Kubernetes", from_kubernetes)) if on]
    if len(given) != 1:
        what = " and ".join(given) if given else "nothing"
        raise InputError(f"give exactly one cluster source (a file, --preset or --from-kubernetes), got {what}")
    if label_selector and not from_kubernetes:
        raise InputError("--selector applies only with --from-kubernetes")
    if path:
        from autodist.resource_spec.cluster_file import read_cluster_file

        return read_cluster_file(path)
    if preset:
        from autodist.resource_spec.presets import from_preset

        return from_preset(preset)
    from autodist.resource_spec.discovery import from_kubernetes as discover

    return discover(label_selector=label_selector, kubeconfig=kubeconfig)


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
