"""The plan as ConfigMaps: gzip-compressed, split so every object stays small.

``kubectl apply`` keeps a copy of each object in an annotation, and
annotations hold at most 256 KiB, so every ConfigMap carries at most
:data:`PART_BYTES` of compressed plan (base64 in ``binaryData`` adds a
third).  Each pod mounts all parts in one projected volume, and an init
container joins and unpacks them into ``/etc/autodist/plan.json``, the file
``autodist worker`` reads.
"""

from __future__ import annotations

import base64
import gzip

PLAN_DIR = "/etc/autodist"
PLAN_FILE = "plan.json"
PLAN_PATH = f"{PLAN_DIR}/{PLAN_FILE}"
PARTS_DIR = "/etc/autodist-parts"
PART_KEY = "plan.json.gz.{:03d}"
# Compressed bytes per ConfigMap: 128 KiB is 171 KiB in base64, well under 256 KiB.
PART_BYTES = 128 * 1024
PLAN_VOLUME = "autodist-plan"
PARTS_VOLUME = "autodist-plan-parts"
# The init container only joins files and runs gunzip.
UNPACK_RESOURCES = {"cpu": "100m", "memory": "256Mi"}


def plan_parts(plan):
    """The plan's JSON, gzip-compressed (no timestamp: same plan, same bytes) and cut into parts."""
    data = gzip.compress(plan.to_json().encode("utf-8"), compresslevel=9, mtime=0)
    return [data[i:i + PART_BYTES] for i in range(0, len(data), PART_BYTES)] or [b""]


def part_name(job_name, index):
    return f"{job_name}-plan-{index}"


def plan_config_maps(plan, namespace, job_name, labels):
    """One ConfigMap per part, named ``<job>-plan-<k>``, with the part in ``binaryData``."""
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": part_name(job_name, k), "namespace": namespace, "labels": dict(labels)},
            "binaryData": {PART_KEY.format(k): base64.b64encode(part).decode("ascii")},
        }
        for k, part in enumerate(plan_parts(plan))
    ]


def read_plan_json(config_maps):
    """The plan's JSON text back from its ConfigMaps (what the init container does, in Python)."""
    parts = sorted((key, value) for cm in config_maps for key, value in cm.get("binaryData", {}).items())
    return gzip.decompress(b"".join(base64.b64decode(value) for _, value in parts)).decode("utf-8")


def plan_volumes(job_name, parts):
    """The volumes of every pod: the parts (projected from the ConfigMaps) and the unpacked plan."""
    sources = [{"configMap": {"name": part_name(job_name, k)}} for k in range(parts)]
    return [{"name": PARTS_VOLUME, "projected": {"sources": sources}}, {"name": PLAN_VOLUME, "emptyDir": {}}]


def plan_mount():
    """The main container's read-only view of the unpacked plan."""
    return {"name": PLAN_VOLUME, "mountPath": PLAN_DIR, "readOnly": True}


def unpack_container(image):
    """The init container that writes ``plan.json`` from the parts (the image's shell and gunzip)."""
    return {
        "name": "unpack-plan",
        "image": image,
        "command": ["sh", "-c", f"cat {PARTS_DIR}/plan.json.gz.* | gunzip > {PLAN_PATH}"],
        "resources": {"requests": dict(UNPACK_RESOURCES), "limits": dict(UNPACK_RESOURCES)},
        "volumeMounts": [
            {"name": PARTS_VOLUME, "mountPath": PARTS_DIR, "readOnly": True},
            {"name": PLAN_VOLUME, "mountPath": PLAN_DIR},
        ],
    }
