"""Create emitted objects in a cluster through the official ``kubernetes`` client.

Credentials come from a kubeconfig (``kubeconfig`` argument, ``$KUBECONFIG``
or ``~/.kube/config``) or, inside a pod, from the service account.  With
``dry_run`` the API server validates and admits every object without
persisting it (``dryRun=All``).  Every failure is a one-line LaunchError.
"""

from __future__ import annotations

import os

from autodist.errors import LaunchError

# kind -> (plural) of the custom resources we emit.
PLURALS = {"TFJob": "tfjobs", "MPIJob": "mpijobs", "PodGroup": "podgroups"}
REQUEST_TIMEOUT_S = 10.0


def _api_client(kubeconfig=None):
    from kubernetes import client, config

    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        if kubeconfig is None and not os.path.exists(path) and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=path, client_configuration=configuration, persist_config=False)
    except (config.ConfigException, OSError) as exc:
        raise LaunchError(f"no usable Kubernetes credentials ({exc})", source=path) from None
    configuration.retries = 0  # an unreachable server fails at once, not after retries
    return client.ApiClient(configuration)


def _create(api_client, obj, dry_run):
    from kubernetes import client

    namespace = obj["metadata"]["namespace"]
    options = {"dry_run": "All" if dry_run else None, "field_validation": "Strict", "_request_timeout": REQUEST_TIMEOUT_S}
    if obj["kind"] == "ConfigMap":
        return client.CoreV1Api(api_client).create_namespaced_config_map(namespace, obj, **options)
    group, _, version = obj["apiVersion"].partition("/")
    plural = PLURALS.get(obj["kind"])
    if plural is None or not version:
        raise LaunchError(f"cannot submit a {obj['kind']} {obj['apiVersion']}")
    return client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        group, version, namespace, plural, obj, **options
    )


def submit(objects, kubeconfig=None, dry_run=False):
    """Create ``objects`` in order; returns ``"<kind>/<name>"`` of each created.

    Raises
    ------
    LaunchError
        No credentials, no reachable API server, or the server refused an object.
    """
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    api_client = _api_client(kubeconfig)
    host = api_client.configuration.host
    created = []
    try:
        for obj in objects:
            where = f"{obj['kind']}/{obj['metadata']['name']}"
            try:
                _create(api_client, obj, dry_run)
            except ApiException as exc:
                raise LaunchError(f"API server refused it: {exc.status} {exc.reason}", source=where) from None
            except HTTPError as exc:
                reason = getattr(exc, "reason", None) or exc
                raise LaunchError(f"cannot reach the Kubernetes API server at {host} ({reason})") from None
            created.append(where)
    finally:
        api_client.close()
    return created
