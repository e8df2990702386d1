"""A real kube-apiserver (1.20.2) with etcd for the tests and benchmarks/k8s_apiserver.py.

``../shared/tools/kube-apiserver.sh`` builds the binaries once (about 6
minutes on 2 cores, cached under ``$AUTODIST_KAPI_DIR``, default
``~/.cache/kapi``) and starts etcd and the API server on localhost.  Here it
is only started when its binaries are already built, unless
``AUTODIST_KAPI_BUILD=1`` asks for the build; a server already answering
under that folder is reused (and left running).

A 1.20 server refuses some of what the shipped Kubeflow Trainer CRDs hold
(a ``default: ""`` on object names, which newer servers accept); the server
gets a copy with those defaults dropped (a list-map key made required
instead).  Those defaults, and every CEL rule (``x-kubernetes-validations``),
stay unchecked by it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.environ.get("AUTODIST_KAPI_SCRIPT", os.path.join(ROOT, "..", "shared", "tools", "kube-apiserver.sh"))
WORK = os.path.expanduser(os.environ.get("AUTODIST_KAPI_DIR", "~/.cache/kapi"))
SCHEMAS = os.path.join(ROOT, "launcher", "k8s_schemas")
BUILD_MINUTES = 6


class Unavailable(Exception):
    """Why no server can be had (a skip reason)."""


def _drop_empty_defaults(node):
    """Remove ``default: ""`` (list-map keys become required instead), in place."""
    if isinstance(node, dict):
        keys = node.get("x-kubernetes-list-map-keys")
        items = node.get("items") if keys else None
        if items and "properties" in items:
            for key in keys:
                if items["properties"].get(key, {}).get("default") == "":
                    items.setdefault("required", [])
                    if key not in items["required"]:
                        items["required"].append(key)
        if node.get("default") == "" and node.get("type") == "string":
            del node["default"]
        for value in node.values():
            _drop_empty_defaults(value)
    elif isinstance(node, list):
        for value in node:
            _drop_empty_defaults(value)


def server_crds(folder):
    """The shipped CRDs as a 1.20 server takes them, written into ``folder``; returns it."""
    os.makedirs(folder, exist_ok=True)
    for name in sorted(os.listdir(SCHEMAS)):
        if not name.endswith(".yaml"):
            continue
        source = os.path.join(SCHEMAS, name)
        if name.startswith("trainer.kubeflow.org_"):
            with open(source, encoding="utf-8") as fh:
                crd = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            _drop_empty_defaults(crd)
            with open(os.path.join(folder, name), "w", encoding="utf-8") as fh:
                yaml.dump(crd, fh, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))
        else:
            shutil.copy(source, folder)
    return folder


def _kubectl(kubeconfig, *args, timeout=120):
    return subprocess.run([os.path.join(WORK, "bin", "kubectl"), "--kubeconfig", kubeconfig, *args],
                          capture_output=True, text=True, timeout=timeout)


def _answering(kubeconfig):
    return os.path.exists(kubeconfig) and _kubectl(kubeconfig, "get", "--raw", "/readyz", timeout=10).returncode == 0


def install_crds(kubeconfig, folder):
    """Create every CRD in ``folder`` the server lacks, and wait until all are established."""
    result = _kubectl(kubeconfig, "create", "--validate=false", "-f", folder)
    refused = [line for line in result.stderr.splitlines() if line.strip() and "AlreadyExists" not in line]
    if refused:
        raise RuntimeError(f"the API server refused a CRD: {refused[0][:300]}")
    waited = _kubectl(kubeconfig, "wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    if waited.returncode:
        raise RuntimeError(f"CRDs not established: {waited.stderr.strip()[:300]}")


def start(crd_folder):
    """``(kubeconfig, started)``: a running server with the CRDs; ``started`` when this call started it.

    Raises :class:`Unavailable` with the reason when there is none to be had.
    """
    kubeconfig = os.path.join(WORK, "run", "kubeconfig")
    server_crds(crd_folder)
    if _answering(kubeconfig):
        install_crds(kubeconfig, crd_folder)
        return kubeconfig, False
    built = os.access(os.path.join(WORK, "bin", "kube-apiserver"), os.X_OK) and shutil.which("etcd")
    if not built and os.environ.get("AUTODIST_KAPI_BUILD") != "1":
        raise Unavailable(f"kube-apiserver is not built under {WORK} (building takes about {BUILD_MINUTES} minutes: "
                          f"run {SCRIPT} once, or set AUTODIST_KAPI_BUILD=1)")
    if not os.path.exists(SCRIPT):
        raise Unavailable(f"no {SCRIPT} to start kube-apiserver with")
    env = {**os.environ, "W": WORK, "CRDS": crd_folder}
    result = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode or not _answering(kubeconfig):
        raise Unavailable(f"kube-apiserver did not start: {(result.stderr or result.stdout).strip()[-300:]}")
    return kubeconfig, True


def stop():
    """Stop the etcd and API server that :func:`start` started (by their recorded process ids)."""
    for name in ("apiserver.pid", "etcd.pid"):
        path = os.path.join(WORK, "run", name)
        try:
            with open(path, encoding="utf-8") as fh:
                os.kill(int(fh.read().strip()), 15)
        except (OSError, ValueError):
            pass


def version(kubeconfig):
    """The server's version (``kubectl version`` short form)."""
    return _kubectl(kubeconfig, "version", "--short").stdout.strip()
