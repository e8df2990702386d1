"""Apply emitted objects to a cluster through the official ``kubernetes`` client.

Every object is applied server-side (``PATCH`` with
``application/apply-patch+yaml``, field manager ``autodist``, ``force``), so
a second submit of the same objects changes nothing and a changed plan
updates the objects in place.  Each object is reported ``created``,
``configured`` (changed) or ``unchanged`` (a server-side dry run of the
apply leaves it as stored, so it is not written).
All or nothing: when the server refuses an object, the objects this submit
created are deleted again (those that existed before are left as they
were) and the failure is one LaunchError line.

Credentials come from a kubeconfig (``kubeconfig`` argument, ``$KUBECONFIG``
or ``~/.kube/config``) or, inside a pod, from the service account.  With
``dry_run`` the API server validates and admits every object without
persisting it (``dryRun=All``).
"""

from __future__ import annotations

import os

from autodist.errors import InputError, LaunchError

FIELD_MANAGER = "autodist"
APPLY_PATCH = "application/apply-patch+yaml"
# kind -> plural of the custom resources we emit or refer to.
PLURALS = {"TFJob": "tfjobs", "MPIJob": "mpijobs", "PodGroup": "podgroups", "TrainJob": "trainjobs",
           "ClusterTrainingRuntime": "clustertrainingruntimes", "TrainingRuntime": "trainingruntimes"}
CLUSTER_SCOPED = {"ClusterTrainingRuntime"}
REQUEST_TIMEOUT_S = 10.0


def _api_client(kubeconfig=None):
    from kubernetes import client, config

    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    try:
        if kubeconfig is None and not os.path.exists(path) and os.environ.get("KUBERNETES_SERVICE_HOST"):
            config.load_incluster_config(client_configuration=configuration)
        else:
            config.load_kube_config(config_file=os.fspath(path), client_configuration=configuration, persist_config=False)
    except (config.ConfigException, OSError) as exc:
        raise LaunchError(f"no usable Kubernetes credentials ({exc})", source=os.fspath(path)) from None
    configuration.retries = 0  # an unreachable server fails at once, not after retries
    return client.ApiClient(configuration)


class _Objects:
    """Get, apply and delete one kind of object by its apiVersion and kind."""

    def __init__(self, api_client):
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    def _custom_args(self, ref):
        group, _, version = ref["apiVersion"].partition("/")
        plural = PLURALS.get(ref["kind"])
        if plural is None or not version:
            raise LaunchError(f"cannot submit a {ref['kind']} {ref['apiVersion']}")
        return group, version, plural

    def get(self, ref):
        """The stored object (a dict), or None when there is none."""
        from kubernetes.client.exceptions import ApiException

        meta = ref["metadata"]
        try:
            if ref["kind"] == "ConfigMap":
                stored = self.core.read_namespaced_config_map(meta["name"], meta["namespace"],
                                                              _request_timeout=REQUEST_TIMEOUT_S)
                return self.core.api_client.sanitize_for_serialization(stored)
            group, version, plural = self._custom_args(ref)
            if ref["kind"] in CLUSTER_SCOPED:
                return self.custom.get_cluster_custom_object(group, version, plural, meta["name"],
                                                             _request_timeout=REQUEST_TIMEOUT_S)
            return self.custom.get_namespaced_custom_object(group, version, meta["namespace"], plural, meta["name"],
                                                            _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def apply(self, obj, dry_run):
        """Server-side apply ``obj``; returns the object as stored (or as it would be), None after a 201 (created)."""
        meta = obj["metadata"]
        options = {"field_manager": FIELD_MANAGER, "force": True, "dry_run": "All" if dry_run else None,
                   "_content_type": APPLY_PATCH, "_request_timeout": REQUEST_TIMEOUT_S}
        if obj["kind"] == "ConfigMap":
            stored = self.core.api_client.sanitize_for_serialization(
                self.core.patch_namespaced_config_map(meta["name"], meta["namespace"], obj, **options))
        else:
            group, version, plural = self._custom_args(obj)
            if obj["kind"] in CLUSTER_SCOPED:
                stored = self.custom.patch_cluster_custom_object(group, version, plural, meta["name"], obj, **options)
            else:
                stored = self.custom.patch_namespaced_custom_object(group, version, meta["namespace"], plural,
                                                                    meta["name"], obj, **options)
        # the client reads no body from a 201 (the apply created the object): None then
        return stored or None

    def delete(self, ref):
        meta = ref["metadata"]
        if ref["kind"] == "ConfigMap":
            self.core.delete_namespaced_config_map(meta["name"], meta["namespace"], _request_timeout=REQUEST_TIMEOUT_S)
            return
        group, version, plural = self._custom_args(ref)
        if ref["kind"] in CLUSTER_SCOPED:
            self.custom.delete_cluster_custom_object(group, version, plural, meta["name"], _request_timeout=REQUEST_TIMEOUT_S)
        else:
            self.custom.delete_namespaced_custom_object(group, version, meta["namespace"], plural, meta["name"],
                                                        _request_timeout=REQUEST_TIMEOUT_S)


def _content(stored):
    """``stored`` without what every write changes (a 1.20 server rewrites managedFields' time on a no-op apply)."""
    meta = {k: v for k, v in stored["metadata"].items() if k not in ("managedFields", "resourceVersion", "generation")}
    return {**stored, "metadata": meta}


def where(obj):
    """``<kind>/<name>``, as kubectl prints an object."""
    return f"{obj['kind']}/{obj['metadata']['name']}"


def _check_preconditions(api, objects, required):
    """InputError unless every namespace the objects use and every ``required`` object exists."""
    from kubernetes.client.exceptions import ApiException

    for namespace in sorted({o["metadata"]["namespace"] for o in objects if "namespace" in o["metadata"]}):
        try:
            api.core.read_namespace(namespace, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiException as exc:
            if exc.status == 404:
                raise InputError(f"namespace {namespace!r} does not exist in the cluster", field="--namespace") from None
            raise
    for ref in required:
        if api.get(ref) is None:
            raise InputError(f"the cluster has no {ref['kind']} {ref['metadata']['name']!r} "
                             f"(leave the option out to emit autodist's)", field=ref.get("field"))


def submit(objects, kubeconfig=None, dry_run=False, required=()):
    """Apply ``objects`` in order, all or nothing; returns ``[(kind/name, action)]``.

    ``action`` is ``created``, ``configured`` or ``unchanged`` (with
    ``dry_run``: what it would be).  ``required`` are objects (apiVersion,
    kind, metadata.name, and ``field``, the option that named them) that must
    exist already.

    Raises
    ------
    InputError
        A namespace or a required object that the cluster does not have (nothing is applied).
    LaunchError
        No credentials, no reachable API server, or the server refused an
        object (the objects this call created are deleted again).
    """
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    api_client = _api_client(kubeconfig)
    host = api_client.configuration.host
    api = _Objects(api_client)
    done, created = [], []
    current = None
    try:
        _check_preconditions(api, objects, required)
        for obj in objects:
            current = obj
            before = api.get(obj)
            if before is None:
                api.apply(obj, dry_run)
                action = "created"
                if not dry_run:
                    created.append(obj)
            elif _content(api.apply(obj, dry_run=True)) == _content(before):
                action = "unchanged"  # not written: no new resourceVersion, nothing for watchers
            else:
                api.apply(obj, dry_run)
                action = "configured"
            done.append((where(obj), action))
    except ApiException as exc:
        removed = _remove(api, created)
        what = where(current) if current is not None else host
        raise LaunchError(f"API server refused it: {exc.status} {exc.reason}{_detail(exc)}{removed}", source=what) from None
    except HTTPError as exc:
        removed = _remove(api, created)
        reason = getattr(exc, "reason", None) or exc
        raise LaunchError(f"cannot reach the Kubernetes API server at {host} ({reason}){removed}") from None
    finally:
        api_client.close()
    return done


def _detail(exc):
    """The server's own message, on one line."""
    import json

    try:
        message = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    return f": {' '.join(message.split())[:300]}" if message else ""


def _remove(api, created):
    """Delete ``created`` in reverse order; a note for the error line."""
    if not created:
        return ""
    left = []
    for obj in reversed(created):
        try:
            api.delete(obj)
        except Exception:  # noqa: BLE001  (reported below: the user must delete it by hand)
            left.append(where(obj))
    note = f"; removed the {len(created) - len(left)} object(s) this submit had created"
    return note + (f", could not remove {', '.join(left)}" if left else "")
