"""Capture every zoo model and record its size and capture time.

Each model is captured in a fresh Python process (so TensorFlow's import and
Keras' name counters do not leak between models); ``capture_seconds`` times
``capture_script`` alone (building the model and tracing one step) after
TensorFlow is imported, ``process_seconds`` the whole process.

Usage::

    python benchmarks/capture_zoo.py [--models resnet50 vgg16 ...] [--out benchmarks/results/capture_zoo.json]
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(HERE, "models")
# model -> script arguments (batch sizes small enough for this machine)
MODELS = {
    "mlp": ["--batch-size", "64"],
    "resnet50": ["--batch-size", "8"],
    "vgg16": ["--batch-size", "4"],
    "inception_v3": ["--batch-size", "8"],
    "bert_base": ["--batch-size", "4"],
    "transformer_lm": ["--batch-size", "8"],
    "wide_deep": ["--batch-size", "256"],
}


def capture_one(name):
    """Capture one model in this process; return its record."""
    start = time.perf_counter()
    import tensorflow  # noqa: F401  (timed apart from the capture)

    import_seconds = time.perf_counter() - start
    from autodist.graph.capture import capture_script

    start = time.perf_counter()
    item = capture_script(os.path.join(ZOO, f"{name}.py"), MODELS[name])
    seconds = time.perf_counter() - start
    save_seconds, load_seconds, json_bytes = json_round_trip(item)
    return {
        "model": name,
        "script_args": MODELS[name],
        "batch_size": item.job.batch_size,
        "optimizer": item.job.optimizer,
        "ops": len(item.ops),
        "ops_by_phase": item.ops_by_phase(),
        "variables": len(item.variables),
        "trainable_variables": len(item.trainable_variables()),
        "parameters": item.parameter_count(),
        "parameter_bytes": item.parameter_bytes(),
        "model_weight_bytes": sum(v.bytes for v in item.model_weights()),
        "sparse_variables": [v.name for v in item.trainable_variables() if v.sparse_gradient],
        "gflops_per_step": round(item.total_flops() / 1e9, 3),
        "json_bytes": json_bytes,
        "json_save_seconds": round(save_seconds, 2),
        "json_load_seconds": round(load_seconds, 2),
        "tf_import_seconds": round(import_seconds, 2),
        "capture_seconds": round(seconds, 2),
    }


def json_round_trip(item):
    """Seconds to save and to load the item's JSON, and its size in bytes."""
    import tempfile

    from autodist.graph.item import GraphItem

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "graph.json")
        start = time.perf_counter()
        item.save(path)
        saved = time.perf_counter()
        loaded = GraphItem.load(path)
        done = time.perf_counter()
        if loaded != item:
            raise SystemExit(f"{item.job.model_name}: JSON round trip changed the item")
        return saved - start, done - saved, os.path.getsize(path)


def machine():
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "os": platform.platform(),
        "load_average_1m_at_end": round(os.getloadavg()[0], 2),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--out", default=os.path.join(HERE, "results", "capture_zoo.json"))
    parser.add_argument("--one", choices=list(MODELS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(capture_one(args.one)))
        return
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    records = []
    for name in args.models:
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "--one", name], capture_output=True, text=True, env=env
        )
        if proc.returncode != 0:
            sys.exit(f"capture of {name} failed:\n{proc.stderr[-2000:]}")
        record = json.loads(proc.stdout.strip().splitlines()[-1])
        record["process_seconds"] = round(time.perf_counter() - start, 2)
        records.append(record)
        print(
            f"{name:15s} {record['ops']:6d} ops {record['trainable_variables']:4d} vars "
            f"{record['parameter_bytes'] / 2**20:9.1f} MiB  capture {record['capture_seconds']:6.1f} s"
            f"  process {record['process_seconds']:6.1f} s  json save/load "
            f"{record['json_save_seconds']:.2f}/{record['json_load_seconds']:.2f} s"
        )
    import tensorflow as tf

    from autodist.io import write_json_atomic

    write_json_atomic(
        args.out,
        {
            "command": "python benchmarks/capture_zoo.py " + " ".join(sys.argv[1:]),
            "machine": machine(),
            "tensorflow": tf.__version__,
            "note": "machine shared with other jobs while measured; capture_seconds = capture_script "
            "(model build + trace + analysis) after TensorFlow is imported (tf_import_seconds)",
            "target": "capture under 60 s per model",
            "models": records,
        },
    )


if __name__ == "__main__":
    main()
