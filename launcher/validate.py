"""Validation of emitted objects before anything is written or submitted.

Three checks, as ``k8s_schemas/SOURCES.md`` lists them:

1. each custom resource against its CRD's ``openAPIV3Schema``, converted to
   JSON Schema, in strict mode (an unknown field is an error, as with
   ``fieldValidation=Strict``);
2. each pod template (wrapped as a ``kind: Pod``) and each core object
   against the Kubernetes OpenAPI schemas bundled by ``kubernetes-validate``;
3. the rules the operators enforce outside the schema.

The CRD files ship with the package (``launcher/k8s_schemas``, their source
and licence in its ``SOURCES.md``); ``$AUTODIST_K8S_SCHEMAS`` names another
folder to read them from instead.
"""

from __future__ import annotations

import functools
import os

from autodist.errors import LaunchError
from launcher.options import DNS_1035_LABEL, MAX_LABEL

SCHEMAS_ENV = "AUTODIST_K8S_SCHEMAS"
# The Kubernetes version whose core schemas pod templates are checked against.
KUBERNETES_VERSION = "1.30.0"

CRD_FILES = {
    ("kubeflow.org/v1", "TFJob"): "kubeflow.org_tfjobs.yaml",
    ("kubeflow.org/v2beta1", "MPIJob"): "kubeflow.org_mpijobs_v2beta1.yaml",
    ("scheduling.volcano.sh/v1beta1", "PodGroup"): "scheduling.volcano.sh_podgroups.yaml",
    ("scheduling.x-k8s.io/v1alpha1", "PodGroup"): "scheduling.x-k8s.io_podgroups.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "trainer.kubeflow.org_trainjobs.yaml",
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"): "trainer.kubeflow.org_clustertrainingruntimes.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): "trainer.kubeflow.org_trainingruntimes.yaml",
}
REPLICA_FIELDS = {"TFJob": "tfReplicaSpecs", "MPIJob": "mpiReplicaSpecs"}


SHIPPED_SCHEMAS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "k8s_schemas")


def schemas_dir():
    """Folder of the CRD files: ``$AUTODIST_K8S_SCHEMAS``, else the copy shipped with the package."""
    return os.path.normpath(os.environ.get(SCHEMAS_ENV) or SHIPPED_SCHEMAS)


def to_json_schema(node, strict=True):
    """Convert an OpenAPI v3 structural schema (a CRD's) to JSON Schema.

    ``x-kubernetes-int-or-string`` becomes integer-or-string, ``nullable``
    allows null, ``x-kubernetes-preserve-unknown-fields`` allows unknown
    fields, a ``metadata`` property is a plain object; in strict mode every
    other object rejects fields its schema does not name.
    """
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {
                name: ({"type": "object"} if name == "metadata" else to_json_schema(sub, strict))
                for name, sub in value.items()
            }
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = to_json_schema(value, strict)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(sub, strict) for sub in value]
        elif key == "nullable" or key.startswith("x-kubernetes-") or key == "format":
            continue
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if strict and node.get("type") == "object" and "additionalProperties" not in node and not preserve:
        out["additionalProperties"] = False
    return out


@functools.lru_cache(maxsize=None)
def crd_schema(api_version, kind):
    """The JSON Schema of a custom resource, from its CRD file."""
    import yaml

    filename = CRD_FILES.get((api_version, kind))
    if filename is None:
        raise LaunchError(f"no CRD schema known for {kind} {api_version}")
    path = os.path.join(schemas_dir(), filename)
    try:
        with open(path, encoding="utf-8") as fh:
            # the C loader when PyYAML has it: these files are ~10k lines
            crd = yaml.load(fh, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError as exc:
        raise LaunchError(f"cannot read CRD schema ({exc.strerror}); set {SCHEMAS_ENV}", source=path) from None
    version = api_version.rpartition("/")[2]
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            return to_json_schema(entry["schema"]["openAPIV3Schema"])
    raise LaunchError(f"CRD has no version {version!r}", source=path)


def _where(obj):
    meta = obj.get("metadata", {})
    return f"{obj.get('kind', '?')} {meta.get('name', '?')}"


def _path(error):
    return ".".join(str(p) for p in error.absolute_path) or "<root>"


def check_custom_resource(obj):
    """Strict JSON-Schema validation of a custom resource against its CRD."""
    import jsonschema

    schema = crd_schema(obj.get("apiVersion"), obj.get("kind"))
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        first = errors[0]
        raise LaunchError(f"{_path(first)}: {first.message}", source=_where(obj))


def check_core_object(obj, where=None):
    """Validate a core object (ConfigMap, Pod, ...) with kubernetes-validate, strictly."""
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        raise LaunchError(f"{_path(exc)}: {exc.message}", source=where or _where(obj)) from None


def check_pod_templates(obj):
    """Each replica's ``template.spec`` as a Pod against the core schema."""
    field = REPLICA_FIELDS[obj["kind"]]
    for replica, spec in sorted(obj["spec"][field].items()):
        template = spec["template"]
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"{obj['metadata']['name']}-{replica.lower()}-0", **template.get("metadata", {})},
            "spec": template["spec"],
        }
        check_core_object(pod, where=f"{_where(obj)}: spec.{field}.{replica}.template")


def check_operator_rules(obj):
    """What the TF and MPI operators enforce beyond their schemas (SOURCES.md)."""
    where = _where(obj)
    kind, spec = obj["kind"], obj["spec"]
    if kind == "TFJob":
        name = obj["metadata"]["name"]
        if len(name) > MAX_LABEL or not DNS_1035_LABEL.match(name):
            raise LaunchError(f"job name {name!r} is not a DNS-1035 label", source=where, field="metadata.name")
        replicas = spec["tfReplicaSpecs"]
        for rtype, r in replicas.items():
            field = f"spec.tfReplicaSpecs.{rtype}"
            containers = r["template"]["spec"].get("containers", [])
            if not any(c.get("name") == "tensorflow" and c.get("image") for c in containers):
                raise LaunchError("no container named 'tensorflow' with an image", source=where, field=field)
            if r.get("restartPolicy", "Always") not in ("Always", "OnFailure", "Never", "ExitCode"):
                raise LaunchError(f"restartPolicy {r['restartPolicy']!r} is not allowed", source=where, field=field)
        chiefs = sum(r.get("replicas", 1) for t, r in replicas.items() if t in ("Chief", "Master"))
        if chiefs > 1:
            raise LaunchError(f"{chiefs} Chief/Master replicas, at most 1 allowed", source=where, field="spec.tfReplicaSpecs")
        if spec.get("successPolicy", "") not in ("", "AllWorkers"):
            raise LaunchError(f"successPolicy {spec['successPolicy']!r} is not allowed", source=where, field="spec.successPolicy")
    elif kind == "MPIJob":
        replicas = spec["mpiReplicaSpecs"]
        launcher = replicas.get("Launcher")
        if launcher is None or launcher.get("replicas", 1) != 1:
            raise LaunchError("needs exactly one Launcher replica", source=where, field="spec.mpiReplicaSpecs.Launcher")
        for rtype, r in replicas.items():
            if r.get("restartPolicy", "Never") not in ("Never", "OnFailure"):
                raise LaunchError(
                    f"restartPolicy {r['restartPolicy']!r} is not allowed", source=where, field=f"spec.mpiReplicaSpecs.{rtype}"
                )
    if kind in REPLICA_FIELDS:
        clean = spec.get("runPolicy", {}).get("cleanPodPolicy", "None")
        if clean not in ("All", "Running", "None"):
            raise LaunchError(f"cleanPodPolicy {clean!r} is not allowed", source=where, field="spec.runPolicy.cleanPodPolicy")


def check_trainjob_pods(objects):
    """A TrainJob's pods as Trainer and JobSet make them from the runtime (launcher.operators), against the core schema."""
    from launcher.operators import trainjob_pods

    if not any(o["kind"] == "ClusterTrainingRuntime" for o in objects):
        return  # the cluster's own runtime (--runtime): its pods are the cluster's to check
    for pod in trainjob_pods(objects)[:1]:  # the pods differ only in their index
        check_core_object(pod, where=f"{_where(objects[-1])}: its pods")


def validate_objects(objects):
    """Raise LaunchError for the first invalid object; return them unchanged."""
    for obj in objects:
        if (obj.get("apiVersion"), obj.get("kind")) in CRD_FILES:
            check_custom_resource(obj)
            check_operator_rules(obj)
            if obj["kind"] in REPLICA_FIELDS:
                check_pod_templates(obj)
        else:
            check_core_object(obj)
    if any(o.get("kind") == "TrainJob" for o in objects):
        check_trainjob_pods(objects)
    return objects
