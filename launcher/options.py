"""What the user chooses when emitting manifests, checked before anything is built."""

from __future__ import annotations

import re
from dataclasses import dataclass

from autodist import __version__
from autodist.errors import InputError

# Kubernetes object names (https://kubernetes.io/docs/concepts/overview/working-with-objects/names/):
# a DNS-1123 label is at most 63 characters of [a-z0-9-], starting and ending alphanumeric;
# a DNS-1035 label (what the TF operator requires of a TFJob name) also starts with a letter.
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_LABEL = 63

# An image reference as the container runtime parses it:
# [registry-host[:port]/]path-component(/path-component)*[:tag][@digest],
# path components lowercase, separated by ".", "_", "__" or runs of "-";
# tags up to 128 word characters, "." or "-"; digests "algorithm:hex".
_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"^(?:{_HOST}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::\w[\w.-]{{0,127}})?(?:@[a-z0-9]+(?:[+._-][a-z0-9]+)*:[0-9a-fA-F]{{32,}})?$"
)

FORMATS = ("tfjob", "mpijob")
GANGS = ("volcano", "coscheduling")

# An image of this project: TensorFlow's GPU image (tensorflow/tensorflow:2.21.0-gpu)
# with autodist installed; nothing is published under this name, build and push it.
DEFAULT_IMAGE = f"autodist:{__version__}"
# The RDMA shared device plugin's example resource name (Mellanox k8s-rdma-shared-dev-plugin).
DEFAULT_RDMA_RESOURCE = "rdma/rdma_shared_device_a"
# Name prefix of the InfiniBand/RoCE adapters NCCL may use (ConnectX adapters are mlx5_*).
DEFAULT_IB_HCA = "mlx5"
# NCCL_SOCKET_IFNAME: a leading "^" excludes interfaces by prefix (loopback, docker bridges).
DEFAULT_SOCKET_IFNAME = "^lo,docker"


def check_dns_label(value, field, dns_1035=False):
    """Raise InputError unless ``value`` is a DNS-1123 (or DNS-1035) label."""
    pattern, kind = (DNS_1035_LABEL, "DNS-1035") if dns_1035 else (DNS_1123_LABEL, "DNS-1123")
    if not isinstance(value, str) or len(value) > MAX_LABEL or not pattern.match(value):
        raise InputError(
            f"{value!r} is not a {kind} label (lowercase letters, digits and '-', "
            f"{'starting with a letter' if dns_1035 else 'starting with a letter or digit'}, "
            f"ending alphanumeric, at most {MAX_LABEL} characters)",
            field=field,
        )


def check_image(value):
    """Raise InputError unless ``value`` is a valid container image reference."""
    if not isinstance(value, str) or len(value) > 4096 or not IMAGE_REFERENCE.match(value):
        raise InputError(f"{value!r} is not a valid container image reference", field="--image")


@dataclass(frozen=True)
class EmitOptions:
    """Choices for the emitted objects.

    Parameters
    ----------
    name : str or None
        Job name (a DNS-1035 label); the plan's name when None.
    namespace : str
        Namespace of every object (a DNS-1123 label).
    image : str
        Container image that has autodist and TensorFlow installed.
    gang : str or None
        ``"volcano"`` or ``"coscheduling"`` to emit a PodGroup as well.
    rdma_resource, ib_hca, socket_ifname : str
        The cluster's RDMA device-plugin resource, NCCL's HCA filter and
        socket interface filter.
    script : str or None
        Path of the training script inside the image; the task that runs the
        training loop starts it (``autodist worker --plan ... SCRIPT ARGS``).
    script_args : tuple of str
        The script's arguments.
    """

    name: str | None = None
    namespace: str = "default"
    image: str = DEFAULT_IMAGE
    gang: str | None = None
    rdma_resource: str = DEFAULT_RDMA_RESOURCE
    ib_hca: str = DEFAULT_IB_HCA
    socket_ifname: str = DEFAULT_SOCKET_IFNAME
    script: str | None = None
    script_args: tuple = ()

    def check(self):
        """Raise InputError for the first invalid choice."""
        check_image(self.image)
        check_dns_label(self.namespace, "--namespace")
        if self.name is not None:
            check_dns_label(self.name, "--name", dns_1035=True)
        if self.gang is not None and self.gang not in GANGS:
            raise InputError(f"unknown gang scheduler {self.gang!r} (expected one of {', '.join(GANGS)})", field="--gang")
        if self.script_args and not self.script:
            raise InputError("script arguments given without a script", field="--script-args")
        if "/" not in self.rdma_resource:
            raise InputError(f"{self.rdma_resource!r} is not an extended resource name (vendor/name)", field="--rdma-resource")
        return self
