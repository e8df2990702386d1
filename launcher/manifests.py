"""Emit a plan as Kubernetes objects: build, validate, then write.

Objects come in creation order: a TrainJob's ClusterTrainingRuntime (unless
``--runtime`` names the cluster's), the ConfigMaps (the plan's parts, the
code with ``--code-from configmap``), then the TFJob, MPIJob or TrainJob.  With gang
scheduling the operator makes the job's PodGroup (:mod:`launcher.operators`
writes what it would).  Every object stays under the 256 KiB that
``kubectl apply`` can record.  A folder of manifests is written whole or not
at all: see :func:`write_manifests`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from autodist.errors import InputError, LaunchError
from launcher.mpijob import build_mpijob
from launcher.options import FORMATS, MAX_LABEL, EmitOptions, check_dns_label
from launcher.plan_data import plan_config_maps
from launcher.pods import code_config_map
from launcher.scheduling import JOB_LABEL, MANAGED_BY_LABEL
from launcher.tfjob import build_tfjob
from launcher.trainjob import build_runtime, build_trainjob
from launcher.validate import validate_objects

BUILDERS = {"tfjob": build_tfjob, "mpijob": build_mpijob, "trainjob": build_trainjob}
# kubectl apply records the object in the last-applied-configuration
# annotation, and an object's annotations hold at most 256 KiB.
MAX_OBJECT_BYTES = 256 * 1024
# The longest Service name the TF operator derives: "<job>-worker-<index>".
_LONGEST_SUFFIX = "-worker-"


def job_name_of(plan, options):
    """The job's name: ``--name`` or the plan's, checked as the TF operator will."""
    name = options.name or plan.name
    check_dns_label(name, "--name" if options.name else f"{plan.where}: name", dns_1035=True)
    longest = f"{name}{_LONGEST_SUFFIX}{len(plan.tasks) - 1}"
    if len(longest) > MAX_LABEL:
        raise InputError(
            f"job name {name!r} is too long: replica Service name {longest!r} exceeds {MAX_LABEL} characters", field="--name"
        )
    return name


def object_bytes(obj):
    """Size of ``obj`` as JSON, as the API server and kubectl's annotation hold it."""
    return len(json.dumps(obj, separators=(",", ":")).encode("utf-8"))


def build_manifests(plan, fmt="tfjob", options=None):
    """Build and validate every object for ``plan``.

    Parameters
    ----------
    plan : autodist.plan.Plan
    fmt : {"tfjob", "mpijob", "trainjob"}
    options : EmitOptions, optional

    Returns
    -------
    list of dict, in creation order; nothing is returned unless all are valid.
    """
    options = (options or EmitOptions()).check()
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})", field="--format")
    name = job_name_of(plan, options)
    objects = plan_config_maps(plan, options.namespace, name, {JOB_LABEL: name})
    code = code_config_map(options, name)
    if code is not None:
        objects.append(code)
    objects.append(BUILDERS[fmt](plan, options, name))
    if fmt == "trainjob" and options.runtime is None:
        objects.insert(0, build_runtime(options))  # cluster-wide, first: the TrainJob names it
    for obj in objects:
        size = object_bytes(obj)
        if size > MAX_OBJECT_BYTES:
            raise LaunchError(f"{obj['kind']} {obj['metadata']['name']} is {size} bytes, more than the "
                              f"{MAX_OBJECT_BYTES} kubectl apply can record", source=plan.where)
    return validate_objects(objects)


def file_name(obj):
    return f"{obj['kind'].lower()}.yaml"


def required_objects(fmt, options):
    """Objects the cluster must already have for this emission (``--runtime``), for :func:`launcher.submit.submit`."""
    from launcher.trainjob import API_VERSION, RUNTIME_KIND

    if fmt == "trainjob" and options.runtime:
        return [{"apiVersion": API_VERSION, "kind": RUNTIME_KIND, "metadata": {"name": options.runtime}, "field": "--runtime"}]
    return []


def to_yaml(objects):
    """Objects as one multi-document YAML text (deterministic)."""
    import yaml

    return "".join("---\n" + yaml.safe_dump(obj, sort_keys=False, default_flow_style=False) for obj in objects)


def manifest_files(objects):
    """File name -> YAML text: one file per kind (``configmap.yaml`` holds every ConfigMap), in creation order."""
    by_file = {}
    for obj in objects:
        by_file.setdefault(file_name(obj), []).append(obj)
    return {name: to_yaml(group) for name, group in by_file.items()}


def _emitted_by_autodist(path):
    """Whether ``path`` is a manifest file autodist wrote: YAML whose every object has our job or managed-by label."""
    import yaml

    if not path.endswith(".yaml") or not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            documents = [d for d in yaml.safe_load_all(fh) if d is not None]
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    def ours(labels):
        return JOB_LABEL in labels or labels.get(MANAGED_BY_LABEL) == "autodist"

    return bool(documents) and all(
        isinstance(d, dict) and ours((d.get("metadata") or {}).get("labels") or {}) for d in documents
    )


def check_output_folder(out_dir, force=False):
    """Raise InputError unless :func:`write_manifests` may replace ``out_dir``; returns its absolute path."""
    out_dir = os.path.abspath(os.fspath(out_dir))
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InputError("exists and is not a directory", source=out_dir)
    if os.path.isdir(out_dir) and not force:
        foreign = [n for n in sorted(os.listdir(out_dir)) if not _emitted_by_autodist(os.path.join(out_dir, n))]
        if foreign:
            raise InputError(f"holds {foreign[0]!r}, which autodist did not emit; "
                             "give --force to replace the folder's content", source=out_dir)
    return out_dir


def write_manifests(objects, out_dir, force=False):
    """Write ``objects`` as the whole content of ``out_dir``; returns the paths.

    All or nothing: the files are written to a temporary folder beside
    ``out_dir``, which then takes its place, so the folder holds exactly this
    set (manifests of an earlier emission that this one lacks are gone).  A
    folder that holds anything else is refused unless ``force``.

    Call only with validated objects (:func:`build_manifests` returns those).
    """
    given, out_dir = out_dir, check_output_folder(out_dir, force)
    files = manifest_files(objects)
    parent, base = os.path.split(out_dir)
    staging = None
    try:
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=f".{base}.tmp-", dir=parent)
        for name, text in files.items():
            with open(os.path.join(staging, name), "w", encoding="utf-8") as fh:
                fh.write(text)
        os.chmod(staging, 0o755)
        if os.path.isdir(out_dir):
            old = tempfile.mkdtemp(prefix=f".{base}.old-", dir=parent)
            os.replace(out_dir, old)  # onto the empty folder just made
            try:
                os.replace(staging, out_dir)
            except OSError:
                os.replace(old, out_dir)  # the earlier emission stays whole
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(staging, out_dir)
        staging = None
    except OSError as exc:
        raise InputError(f"cannot write ({exc.strerror})", source=out_dir) from None
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return [os.path.join(os.fspath(given), name) for name in files]
