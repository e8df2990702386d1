"""Emit a plan as Kubernetes objects: build, validate, then write.

Objects come in creation order: the plan's ConfigMap, the PodGroup (when
gang scheduling is asked for), then the TFJob or MPIJob.
"""

from __future__ import annotations

import os

from autodist.errors import InputError, LaunchError
from autodist.io import write_text_atomic
from launcher.mpijob import build_mpijob
from launcher.options import FORMATS, MAX_LABEL, EmitOptions, check_dns_label
from launcher.podgroup import build_podgroup
from launcher.pods import config_map
from launcher.tfjob import build_tfjob
from launcher.validate import validate_objects

BUILDERS = {"tfjob": build_tfjob, "mpijob": build_mpijob}
# A ConfigMap holds at most 1 MiB (Kubernetes API limit on its data).
MAX_CONFIG_MAP_BYTES = 1024 * 1024
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


def build_manifests(plan, fmt="tfjob", options=None):
    """Build and validate every object for ``plan``.

    Parameters
    ----------
    plan : autodist.plan.Plan
    fmt : {"tfjob", "mpijob"}
    options : EmitOptions, optional

    Returns
    -------
    list of dict, in creation order; nothing is returned unless all are valid.
    """
    options = (options or EmitOptions()).check()
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})", field="--format")
    name = job_name_of(plan, options)
    cm = config_map(plan, options, name)
    size = len(cm["data"]["plan.json"].encode())
    if size > MAX_CONFIG_MAP_BYTES:
        raise LaunchError(f"plan is {size} bytes, more than a ConfigMap holds ({MAX_CONFIG_MAP_BYTES})", source=plan.where)
    job = BUILDERS[fmt](plan, options, name)
    objects = [cm]
    if options.gang:
        objects.append(build_podgroup(job, options.gang))
    objects.append(job)
    return validate_objects(objects)


def file_name(obj):
    return f"{obj['kind'].lower()}.yaml"


def to_yaml(objects):
    """Objects as one multi-document YAML text (deterministic)."""
    import yaml

    return "".join("---\n" + yaml.safe_dump(obj, sort_keys=False, default_flow_style=False) for obj in objects)


def write_manifests(objects, out_dir):
    """Write each object to ``out_dir/<kind>.yaml`` atomically; returns the paths.

    Call only with validated objects (:func:`build_manifests` returns those).
    """
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise InputError("exists and is not a directory", source=out_dir)
    texts = {os.path.join(out_dir, file_name(obj)): to_yaml([obj]) for obj in objects}
    for path, text in texts.items():
        write_text_atomic(path, text)
    return list(texts)
