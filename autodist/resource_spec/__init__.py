"""The cluster model: nodes, devices and links (see spec.py for the names).

:func:`load_cluster` reads a cluster from exactly one source (a file,
:func:`from_preset`, Kubernetes); the command line's cluster options are
autodist.cli.cluster_args.
"""

from autodist.errors import InputError
from autodist.resource_spec.presets import MACHINES, did_you_mean, machine, node_names, parse_preset_name
from autodist.resource_spec.spec import DeviceSpec, LinkSpec, NodeSpec, Path, ResourceSpec

__all__ = [
    "DeviceSpec",
    "LinkSpec",
    "NodeSpec",
    "Path",
    "ResourceSpec",
    "from_preset",
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
        return from_preset(preset)
    from autodist.resource_spec.discovery import from_kubernetes as discover

    return discover(label_selector=label_selector, kubeconfig=kubeconfig)


def from_preset(text):
    """The :class:`ResourceSpec` of preset ``"NAME[:N]"``, e.g. ``"dgx-h100:4"``.

    ``local`` describes this machine as discovered (see
    :func:`autodist.resource_spec.discovery.local_machine`); ``emu-100mbit``,
    ``emu-1gbit`` and ``emu-10gbit`` are clusters emulated on it
    (:mod:`autodist.resource_spec.emulated`).
    """
    name, count = parse_preset_name(text)
    if name == "local":
        if count != 1:
            raise InputError(f"'local' is this one machine and takes no node count, got {text!r}", field="preset")
        from autodist.resource_spec.discovery import local_machine

        return local_machine()
    from autodist.resource_spec.emulated import EMULATED_RATES, emulated_preset

    if name in EMULATED_RATES:
        return emulated_preset(name, count)
    if name not in MACHINES:
        known = [*MACHINES, *EMULATED_RATES]
        raise InputError(f"unknown preset {name!r}{did_you_mean(name, known)}; known: {', '.join(known)}",
                         field="preset")
    preset = machine(name, field="preset")
    nodes = [preset.node(n) for n in node_names(preset.node_prefix, count)]
    return ResourceSpec(nodes, name=f"{name}:{count}" if count > 1 else name)
