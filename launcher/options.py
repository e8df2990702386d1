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

FORMATS = ("tfjob", "mpijob", "trainjob")
GANGS = ("volcano", "coscheduling")

# An image of this project: TensorFlow's GPU image (tensorflow/tensorflow:2.21.0-gpu)
# with autodist installed; nothing is published under this name, build and push it.
DEFAULT_IMAGE = f"autodist:{__version__}"
# The RDMA shared device plugin's example resource name (Mellanox k8s-rdma-shared-dev-plugin).
DEFAULT_RDMA_RESOURCE = "rdma/rdma_shared_device_a"
# NCCL_SOCKET_IFNAME: a leading "^" excludes interfaces by prefix: loopback, docker
# bridges, and what CNI plugins add on a host (cni0, flannel.1, cali*, veth*,
# tunl0, kube-ipvs0), which host-networked pods see.
DEFAULT_SOCKET_IFNAME = "^lo,docker,cni,flannel,cali,veth,tunl,kube"


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


# Failure and lifetime defaults: a few retries, a week at most, pods and status kept a day after the end.
DEFAULT_BACKOFF_LIMIT = 3
DEFAULT_RUNNING_TIMEOUT_S = 7 * 24 * 3600
DEFAULT_TTL_AFTER_FINISHED_S = 24 * 3600
# /dev/shm of a pod that runs NCCL: its shared-memory transport and RDMA
# buffers need more than the 64 MiB a container gets by default.
DEFAULT_SHM_SIZE = "16Gi"
# Where the job's code is in the pod: the image's working directory (see the Dockerfile).
CODE_DIR = "/workspace"
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# A Kubernetes resource quantity: a decimal number with an optional binary or decimal suffix.
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
# A label key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters.
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def check_quantity(value, field):
    """Raise InputError unless ``value`` is a Kubernetes quantity (``16Gi``, ``500m``, ``4``)."""
    if not isinstance(value, str) or not QUANTITY.match(value):
        raise InputError(f"{value!r} is not a Kubernetes quantity (e.g. 16Gi, 500m, 4)", field=field)


def parse_duration(value, field):
    """Seconds of ``value``: a whole number of seconds, or a number with unit s, m, h or d (``36h``)."""
    text = str(value).strip()
    number, unit = (text[:-1], text[-1]) if text[-1:] in DURATION_UNITS else (text, "s")
    if not number.isdigit() or int(number) * DURATION_UNITS[unit] <= 0:
        raise InputError(f"{value!r} is not a positive duration (seconds, or a number with s, m, h or d)", field=field)
    return int(number) * DURATION_UNITS[unit]


def parse_key_value(text, field, what="KEY=VALUE"):
    """``(key, value)`` of ``KEY=VALUE``; InputError when there is no ``=`` or no key."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise InputError(f"{text!r} is not {what}", field=field)
    return key, value


def parse_env(text):
    """An environment variable ``NAME=VALUE`` as a container's ``env`` entry."""
    name, value = parse_key_value(text, "--env", "NAME=VALUE")
    if not ENV_NAME.match(name):
        raise InputError(f"{name!r} is not an environment variable name", field="--env")
    return {"name": name, "value": value}


def parse_selector(text):
    """A node label ``key=value`` for the pods' node selector (Arena's ``--selector``)."""
    key, value = parse_key_value(text, "--node-selector", "a node label key=value")
    check_label(key, value, "--node-selector")
    return key, value


def check_label(key, value, field):
    if not LABEL_KEY.match(key) or len(key.partition("/")[0]) > 253:
        raise InputError(f"{key!r} is not a label key", field=field)
    if len(value) > MAX_LABEL or not LABEL_VALUE.match(value):
        raise InputError(f"{value!r} is not a label value", field=field)


def parse_toleration(text):
    """A pod toleration from ``KEY[=VALUE]:EFFECT``, ``KEY[=VALUE]`` (every effect) or ``all`` (Arena's form)."""
    if text == "all":
        return {"operator": "Exists"}
    spec, _, effect = text.rpartition(":") if ":" in text else (text, "", "")
    if effect and effect not in TOLERATION_EFFECTS:
        raise InputError(f"{text!r}: effect {effect!r} is not one of {', '.join(TOLERATION_EFFECTS)}", field="--toleration")
    key, sep, value = spec.partition("=")
    if not key or not LABEL_KEY.match(key) or (sep and not LABEL_VALUE.match(value)):
        raise InputError(f"{text!r} is not KEY[=VALUE][:EFFECT] or 'all'", field="--toleration")
    toleration = {"key": key, "operator": "Equal", "value": value} if sep else {"key": key, "operator": "Exists"}
    if effect:
        toleration["effect"] = effect
    return toleration


def parse_data_volume(text):
    """``(claim, mount path)`` of Arena's ``--data CLAIM:/MOUNT/PATH``."""
    claim, sep, path = text.partition(":")
    if not sep or not path.startswith("/"):
        raise InputError(f"{text!r} is not CLAIM:/MOUNT/PATH", field="--data")
    check_dns_label(claim, "--data")
    return claim, path


def parse_code_from(text):
    """Where the job's code comes from: ``("image",)``, ``("configmap",)`` or ``("pvc", CLAIM, PATH)``.

    With ``pvc:CLAIM:PATH`` the claim's folder ``PATH`` is mounted as the
    code folder; ``/`` is the whole claim.
    """
    if text in ("image", "configmap"):
        return (text,)
    kind, _, rest = text.partition(":")
    claim, sep, path = rest.partition(":")
    if kind != "pvc" or not claim or not sep or not path:
        raise InputError(f"{text!r} is not image, configmap or pvc:CLAIM:PATH (with a path)", field="--code-from")
    check_dns_label(claim, "--code-from")
    if ".." in path.split("/"):
        raise InputError(f"{path!r}: the path may not leave the claim ('..')", field="--code-from")
    return ("pvc", claim, path)


def parse_network(text):
    """``("host",)`` or ``("attachment", NAME)``: how pods reach RDMA NICs; None for the pod network."""
    if text is None:
        return None
    if text == "host":
        return ("host",)
    kind, sep, name = text.partition(":")
    if kind != "attachment" or not sep:
        raise InputError(f"{text!r} is not host or attachment:NAME", field="--network")
    namespace, slash, short = name.rpartition("/")
    for part in ([namespace] if slash else []) + [short]:
        check_dns_label(part, "--network")
    return ("attachment", name)


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
    rdma_resource, socket_ifname : str
        The cluster's RDMA device-plugin resource and NCCL's socket interface filter.
    ib_hca : str or None
        NCCL_IB_HCA; None names the first adapters exactly, one per RDMA NIC
        of a node (``=mlx5_0,mlx5_1``, see :func:`launcher.pods.exact_hcas`).
    script : str or None
        The training script, relative to the code folder (or absolute in the
        pod); the task that runs the training loop starts it
        (``autodist worker --plan ... SCRIPT ARGS``).
    script_args : tuple of str
        The script's arguments.
    code_from : str
        ``image`` (the code is in the image's ``/workspace``), ``configmap``
        (the script's folder is carried by a ConfigMap, see ``code_files``)
        or ``pvc:CLAIM:PATH``.
    code_files : tuple of (str, str)
        With ``code_from="configmap"``: (file name, text) of each file.
    network : str or None
        ``host`` or ``attachment:NAME`` (a Multus NetworkAttachmentDefinition)
        for pods that use RDMA.
    cpu, memory : str or None
        Requests and limits of every task's pod; None takes them from the
        cluster spec (see :mod:`launcher.pods`).
    shm_size : str
        ``sizeLimit`` of the memory-backed ``/dev/shm``.
    backoff_limit : int
        Restarts the operator allows before the job fails.
    running_timeout : int
        ``activeDeadlineSeconds`` of the job.
    ttl_after_finished : int
        ``ttlSecondsAfterFinished``: how long a finished job's pods are kept.
    queue, priority : str or None
        Scheduler queue and PriorityClass name (DNS-1123 labels).
    data : tuple of str
        ``CLAIM:/MOUNT/PATH`` volumes (Arena's ``--data``).
    image_pull_secrets : tuple of str
        Secret names for pulling the image.
    env : tuple of str
        ``NAME=VALUE`` variables of every container.
    selector : tuple of str
        ``key=value`` node labels every pod requires.
    tolerations : tuple of str
        ``KEY[=VALUE][:EFFECT]`` or ``all``.
    log_dir : str or None
        Where the script writes TensorBoard logs (``$AUTODIST_LOG_DIR``);
        put it on a ``data`` volume to keep them.
    runtime : str or None
        A TrainJob's ClusterTrainingRuntime that the cluster has; None emits
        autodist's (:mod:`launcher.trainjob`).
    """

    name: str | None = None
    namespace: str = "default"
    image: str = DEFAULT_IMAGE
    gang: str | None = None
    rdma_resource: str = DEFAULT_RDMA_RESOURCE
    ib_hca: str | None = None
    socket_ifname: str = DEFAULT_SOCKET_IFNAME
    script: str | None = None
    script_args: tuple = ()
    code_from: str = "image"
    code_files: tuple = ()
    network: str | None = None
    cpu: str | None = None
    memory: str | None = None
    shm_size: str = DEFAULT_SHM_SIZE
    backoff_limit: int = DEFAULT_BACKOFF_LIMIT
    running_timeout: int = DEFAULT_RUNNING_TIMEOUT_S
    ttl_after_finished: int = DEFAULT_TTL_AFTER_FINISHED_S
    queue: str | None = None
    priority: str | None = None
    data: tuple = ()
    image_pull_secrets: tuple = ()
    env: tuple = ()
    selector: tuple = ()
    tolerations: tuple = ()
    log_dir: str | None = None
    runtime: str | None = None

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
        code = parse_code_from(self.code_from)
        if code == ("configmap",) and not self.code_files:
            raise InputError("--code-from configmap needs the script's folder: give a local --script", field="--code-from")
        parse_network(self.network)
        for value, field in ((self.cpu, "--cpu"), (self.memory, "--memory"), (self.shm_size, "--shm-size")):
            if value is not None:
                check_quantity(value, field)
        for value, field in ((self.backoff_limit, "--backoff-limit"), (self.running_timeout, "--running-timeout"),
                             (self.ttl_after_finished, "--ttl-after-finished")):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InputError(f"must be a whole number of at least 0, got {value!r}", field=field)
        for value, field in ((self.queue, "--queue"), (self.priority, "--priority")):
            if value is not None:
                check_dns_label(value, field)
        if self.queue is not None and self.gang == "coscheduling":
            raise InputError("the coscheduling PodGroup has no queue (Volcano's has)", field="--queue")
        for secret in self.image_pull_secrets:
            check_dns_label(secret, "--image-pull-secret")
        for text in self.data:
            parse_data_volume(text)
        for text in self.env:
            parse_env(text)
        for text in self.selector:
            parse_selector(text)
        for text in self.tolerations:
            parse_toleration(text)
        if self.runtime is not None:
            check_dns_label(self.runtime, "--runtime")
        if self.log_dir is not None and not self.log_dir.startswith("/"):
            raise InputError(f"{self.log_dir!r} is not an absolute path", field="--logdir")
        return self
