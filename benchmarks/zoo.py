"""The zoo's captured graphs and the machine description, shared by the benchmarks.

Each model is captured in a fresh Python process (so Keras' name counters and
TensorFlow state do not leak between models) and cached as graph JSON under
``tmp/zoo_graphs`` (git-ignored), keyed by model, batch size and the code that
made it (the zoo's scripts and autodist/graph): a capture made before capture
changed is never read again (one made before capture recorded ``jit_compile``
priced the placement benchmark's GPU cells without XLA).
"""

import hashlib
import os
import platform
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS_DIR = os.path.join(REPO, "benchmarks", "models")
CACHE = os.path.join(REPO, "tmp", "zoo_graphs")

# zoo script -> per-replica batch size small enough to capture and train here
BATCH_SIZES = {
    "mlp": 64,
    "resnet50": 8,
    "vgg16": 4,
    "inception_v3": 8,
    "bert_base": 4,
    "transformer_lm": 8,
    "wide_deep": 256,
}


def script_args(name, batch_size=None):
    return ["--steps", "1", "--batch-size", str(batch_size or BATCH_SIZES[name])]


def graph_file(name, batch_size=None):
    """Path of the zoo model's graph JSON at ``batch_size`` (default: BATCH_SIZES), captured once."""
    batch_size = batch_size or BATCH_SIZES[name]
    path = os.path.join(CACHE, f"{name}_b{batch_size}_{capture_code_digest()}.json")
    if not os.path.exists(path):
        os.makedirs(CACHE, exist_ok=True)
        code = (
            "import sys; from autodist.graph.capture import capture_script; "
            "capture_script(sys.argv[1], sys.argv[3:]).save(sys.argv[2])"
        )
        script = os.path.join(MODELS_DIR, f"{name}.py")
        subprocess.run(
            [sys.executable, "-c", code, script, path, *script_args(name, batch_size)], check=True, cwd=REPO
        )
    return path


def capture_code_digest():
    """A short digest of the files a capture depends on: the zoo's scripts and autodist/graph."""
    digest = hashlib.sha256()
    for folder in (MODELS_DIR, os.path.join(REPO, "autodist", "graph")):
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as f:
                    digest.update(name.encode() + f.read())
    return digest.hexdigest()[:12]


def captured(name, batch_size=None):
    """The zoo model's GraphItem (see :func:`graph_file`)."""
    from autodist.graph.item import GraphItem

    return GraphItem.load(graph_file(name, batch_size))


def machine():
    """One line naming this machine and how loaded it was."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}, "
        f"load average {load:.1f} at start"
    )
