"""Check emitted objects against a real API server where no operator runs.

:func:`check_on_server` applies a job's objects (:func:`launcher.submit.submit`),
reads back what the server stored and compares it with what was sent (a
1.20 server prunes unknown fields silently instead of refusing them), then
creates what the operator would (:mod:`launcher.operators`): the PodGroup
and the Pods, which the server checks in full (a custom resource's pod
template is checked only against its CRD's schema).  The tests
(tests/test_k8s_apiserver.py) and benchmarks/k8s_apiserver.py use it.
"""

from __future__ import annotations

import re

from launcher import operators
from launcher.submit import _api_client, _Objects, submit

# Fields the server adds to every object it stores.
SERVER_METADATA = {"uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink"}
# Fields the server fills in from the CRDs' and core types' defaults (``+`` an added path).
SERVER_DEFAULTS = (
    r"\+\.spec\.runPolicy\.suspend",  # TFJob, MPIJob: default false
    r"\+\.spec\.runLauncherAsWorker", r"\+\.spec\.sshAuthMountPath",  # MPIJob: false, /root/.ssh
    r"\+.*\.containers\[\d+\]\.ports\[\d+\]\.protocol",  # TCP
    r"\+\.spec\.managedBy", r"\+\.spec\.suspend",  # TrainJob: the trainjob-controller, false
    r"\+\.spec\.template\.spec\.failurePolicy\.restartStrategy",  # JobSet: Recreate
    r"\+\.spec\.template\.spec\.replicatedJobs\[\d+\]\.groupName",  # JobSet: default
    r"\+\.spec\.podGroupPolicy\.coscheduling\.scheduleTimeoutSeconds",  # Trainer: 60
)


def differences(sent, stored, path=""):
    """Paths where ``stored`` lacks or changed what ``sent`` holds, and paths ``stored`` adds (``+path``)."""
    out = []
    if isinstance(sent, dict) and isinstance(stored, dict):
        for key, value in sent.items():
            if key not in stored:
                out.append(f"-{path}.{key}")
            else:
                out += differences(value, stored[key], f"{path}.{key}")
        for key in stored.keys() - sent.keys():
            if not (path == ".metadata" and key in SERVER_METADATA):
                out.append(f"+{path}.{key}")
    elif isinstance(sent, list) and isinstance(stored, list) and len(sent) == len(stored):
        for i, (a, b) in enumerate(zip(sent, stored)):
            out += differences(a, b, f"{path}[{i}]")
    elif sent != stored:
        out.append(f"~{path}")
    return out


def _operator_objects(objects, gang, fmt):
    """What the operator creates beside the pods: the PodGroup and, for an MPIJob, its ConfigMap and Secret."""
    job = objects[-1]
    namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
    out = []
    if gang:
        out.append(operators.trainjob_podgroup(objects, gang) if fmt == "trainjob" else operators.operator_podgroup(job, gang))
    if fmt == "mpijob":
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{name}-config", "namespace": namespace},
                    "data": {"hostfile": operators.mpijob_hostfile(job), "discover_hosts.sh": "#!/bin/sh\n"}})
        out.append({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/ssh-auth",
                    "metadata": {"name": f"{name}-ssh", "namespace": namespace},
                    "stringData": {"ssh-privatekey": "-", "ssh-publickey": "-"}})
    return out


def operator_pods(objects, fmt, gang):
    """The Pods the job's operator would create from the emitted ``objects``."""
    job = objects[-1]
    if fmt == "tfjob":
        return operators.tfjob_pods(job, gang)
    if fmt == "mpijob":
        return operators.mpijob_pods(job, gang)
    return operators.trainjob_pods(objects, gang)


def _create(api_client, obj):
    from kubernetes import client

    namespace = obj["metadata"]["namespace"]
    if obj["kind"] == "Pod":
        return client.CoreV1Api(api_client).create_namespaced_pod(namespace, obj)
    if obj["kind"] == "ConfigMap":
        return client.CoreV1Api(api_client).create_namespaced_config_map(namespace, obj)
    if obj["kind"] == "Secret":
        return client.CoreV1Api(api_client).create_namespaced_secret(namespace, obj)
    group, _, version = obj["apiVersion"].partition("/")
    return client.CustomObjectsApi(api_client).create_namespaced_custom_object(group, version, namespace, "podgroups", obj)


def stored_object(api_client, obj):
    """The server's copy of ``obj`` as plain JSON data, or None."""
    return _Objects(api_client).get(obj)


def unexpected(paths):
    """The differences that are not server defaults (:data:`SERVER_DEFAULTS`)."""
    return [p for p in paths if not any(re.fullmatch(pattern, p) for pattern in SERVER_DEFAULTS)]


def check_on_server(objects, fmt, gang, kubeconfig=None):
    """Apply ``objects``, compare the stored copies, create the operator's objects and Pods.

    Returns a dict: ``applied`` (``kind/name`` -> action), ``differences``
    (``kind/name`` -> paths, only where any), ``operator_objects`` and
    ``pods`` (names the server accepted), ``refused`` (``name: reason``).
    """
    from kubernetes.client.exceptions import ApiException

    result = {"applied": dict(submit(objects, kubeconfig=kubeconfig)), "differences": {}, "operator_objects": [],
              "pods": [], "refused": []}
    api_client = _api_client(kubeconfig)
    try:
        for obj in objects:
            diff = differences(obj, stored_object(api_client, obj))
            if diff:
                result["differences"][f"{obj['kind']}/{obj['metadata']['name']}"] = diff
        for obj in _operator_objects(objects, gang, fmt) + operator_pods(objects, fmt, gang):
            try:
                _create(api_client, obj)
                result["pods" if obj["kind"] == "Pod" else "operator_objects"].append(f"{obj['kind']}/{obj['metadata']['name']}")
            except ApiException as exc:
                result["refused"].append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.status} {exc.reason}")
    finally:
        api_client.close()
    return result


def stored_pods(namespace, kubeconfig=None):
    """The Pods stored in ``namespace`` (plain data), by name."""
    from kubernetes import client

    api_client = _api_client(kubeconfig)
    try:
        pods = client.CoreV1Api(api_client).list_namespaced_pod(namespace).items
        return {p.metadata.name: api_client.sanitize_for_serialization(p) for p in pods}
    finally:
        api_client.close()


# Namespaced kinds the checks create, as (group, version, plural).
CUSTOM_KINDS = (("kubeflow.org", "v1", "tfjobs"), ("kubeflow.org", "v2beta1", "mpijobs"),
                ("trainer.kubeflow.org", "v1alpha1", "trainjobs"), ("scheduling.volcano.sh", "v1beta1", "podgroups"),
                ("scheduling.x-k8s.io", "v1alpha1", "podgroups"))


def fresh_namespace(prefix, kubeconfig=None):
    """Create a namespace ``<prefix>-<random>``; returns its name."""
    import uuid

    from kubernetes import client

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    api_client = _api_client(kubeconfig)
    try:
        client.CoreV1Api(api_client).create_namespace({"metadata": {"name": name}})
    finally:
        api_client.close()
    return name


def remove_namespace(name, kubeconfig=None):
    """Delete what the checks create in namespace ``name``, then the namespace.

    Without a namespace controller (a bare API server) the namespace stays
    Terminating, empty.
    """
    from kubernetes import client

    api_client = _api_client(kubeconfig)
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    try:
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        core.delete_collection_namespaced_config_map(name)
        core.delete_collection_namespaced_secret(name)
        for group, version, plural in CUSTOM_KINDS:
            custom.delete_collection_namespaced_custom_object(group, version, name, plural)
        core.delete_namespace(name)
    finally:
        api_client.close()
