"""TF_CONFIG for every task of a plan, and the cluster spec a TFJob implies.

The Kubeflow training operator writes TF_CONFIG into each TFJob pod itself,
from the replica specs: job ``<replica type in lower case>``, one address
``<job name>-<type>-<index>.<namespace>.svc:<tfjob-port>`` per replica.
:func:`operator_cluster_spec` rebuilds that from a manifest, so a plan's own
TF_CONFIG (what local and custom launchers use) can be checked against it.
"""

from __future__ import annotations

import json

from autodist.plan import DEFAULT_PORT


def tf_config_json(plan, job, index, addresses=None, namespace=None, port=DEFAULT_PORT):
    """The TF_CONFIG value (compact JSON text) of task ``job:index``."""
    config = plan.tf_config(job, index, addresses=addresses, namespace=namespace, port=port)
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def task_environments(plan, addresses=None, namespace=None, port=DEFAULT_PORT):
    """``(job, index)`` -> ``{"TF_CONFIG": ...}`` for every task of the plan."""
    return {
        (t["job"], t["index"]): {"TF_CONFIG": tf_config_json(plan, t["job"], t["index"], addresses, namespace, port)}
        for t in plan.tasks
    }


def operator_cluster_spec(tfjob):
    """The cluster spec the TF operator derives from a TFJob manifest (a dict)."""
    name = tfjob["metadata"]["name"]
    namespace = tfjob["metadata"].get("namespace", "default")
    spec = {}
    for rtype, replica in tfjob["spec"]["tfReplicaSpecs"].items():
        port = DEFAULT_PORT
        for container in replica["template"]["spec"]["containers"]:
            for p in container.get("ports", []):
                if p.get("name") == "tfjob-port":
                    port = p["containerPort"]
        job = rtype.lower()
        spec[job] = [f"{name}-{job}-{i}.{namespace}.svc:{port}" for i in range(replica.get("replicas", 1))]
    return spec
