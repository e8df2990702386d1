"""Capture the steps behind the GPU calibration rows and ship them as step tables.

The published single-GPU figures (cost_models/data/published/calibration.csv,
transcribed from ../shared/reference/published-training-figures.md) are runs
of ResNet-50, ResNeXt-101 32x4d and BERT-base/large at several sequence
lengths, in FP32 and in mixed precision.  This script captures the zoo's
equivalent Keras models (``--mixed-precision`` for the AMP runs; NVIDIA's
TensorFlow 1 BERT with the tanh GELU, its AMP runs with
``--amp-graph-rewrite``, see cost_models.fitting.published.CONFIGS) at two
small batch sizes in fresh processes, and writes each step's table
(cost_models.step_table) at both sizes, with the job the capture recorded
(autodist.graph.item.JobInfo: precision, XLA as the script asks for it), to
``cost_models/data/published/<config>.npz``; the tables scale to the
published batch sizes exactly (FLOPs and bytes are affine in the batch).
They are a cache of what ``autodist capture`` gives for the same command:
``costmodel eval`` prices each row from them with the job options a user
gives ``placement report`` (cost_models.fitting.published).

    python benchmarks/gpu_published_graphs.py [--only CONFIG ...]
"""

import argparse
import gzip
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from cost_models.fitting.published import CONFIGS, DATA_DIR, GRAPHS_DIR  # noqa: E402
from cost_models.step_table import load_tables, save_tables  # noqa: E402

BATCHES = (2, 4)
# The captured graph of each configuration at the second batch (80-450 kB gzipped) is kept too
# (cost_models/fitting/data/published/graphs): placement report's jobs for the multi-GPU rows
# (cost_models.fitting.cluster_published) and for the tests that price calibration rows through it
# (tests/test_one_path.py).  Not at the first: at 2 samples, BERT's batch x sequence equals a hidden size
# (2 x 384 = 768, 2 x 512 = 1024), which autodist.graph.rebatch cannot tell from the batch.
KEPT_BATCH = BATCHES[1]
CAPTURE = """
import dataclasses
import json
import sys
from autodist.graph.capture import capture_script
from cost_models.step_table import save_tables, step_table
item = capture_script(sys.argv[1], sys.argv[3:])
item.save(sys.argv[2] + ".graph.json")
slots = sum(v.bytes for v in item.slot_variables())
save_tables(sys.argv[2], {"step": step_table(item)},
            {"parameter_bytes": item.parameter_bytes(), "slot_bytes": slots, "batch": item.job.batch_size,
             "ops": len(item.ops), "tf_version": item.job.tf_version,
             "job": json.dumps(dataclasses.asdict(item.job), sort_keys=True)})
"""


def capture(config):
    script, args = CONFIGS[config]
    tables, scalars = {}, {}
    for batch in BATCHES:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "t.npz")
            subprocess.run([sys.executable, "-c", CAPTURE, os.path.join("benchmarks", "models", script), path,
                            "--steps", "1", "--batch-size", str(batch), *args], check=True, cwd=REPO,
                           stderr=subprocess.DEVNULL)
            got, meta = load_tables(path)
            if batch == KEPT_BATCH:
                os.makedirs(GRAPHS_DIR, exist_ok=True)
                with open(path + ".graph.json", "rb") as f, \
                        gzip.GzipFile(os.path.join(GRAPHS_DIR, f"{config}.json.gz"), "wb", mtime=0) as out:
                    out.write(f.read())
        tables[f"b{batch}"] = got["step"]
        scalars.update({k: v for k, v in meta.items() if k != "batch"})
        scalars[f"batch_b{batch}"] = batch
    scalars["command"] = " ".join(["python", script, *args])
    os.makedirs(DATA_DIR, exist_ok=True)
    save_tables(os.path.join(DATA_DIR, f"{config}.npz"), tables, scalars)
    print(f"{config}: {scalars['ops']} ops, {scalars['parameter_bytes'] / 1e6:.1f} MB of parameters", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=sorted(CONFIGS), choices=sorted(CONFIGS))
    for config in parser.parse_args().only:
        capture(config)


if __name__ == "__main__":
    main()
