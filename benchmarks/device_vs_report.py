"""Steps measured on a lent GPU beside what the user's commands predict for them.

For every configuration that ``benchmarks/device/keras_jax_steps.py`` measured
(the zoo's Keras models on one GPU, Keras 3's JAX backend, XLA), this runs the
commands a user runs, as subprocesses:

    autodist capture benchmarks/models/MODEL.py -o GRAPH -- --steps 1 --batch-size SMALL [--mixed-precision]
    placement report GRAPH --cluster ONE_GPU.yaml --global-batch BATCH --moves 1 --format json

and sets the report's throughput and peak memory beside the measured ones.
Where the measurement traced the GPU's kernels (``keras_jax_steps.py
--profile``), it also sets the kernel model's seconds per kernel class
(convolutions, matrix products, memory-bound kernels) beside the traced
kernels' of the same class, and the GPU's busy time beside the step.
Validation only: nothing is fitted on these figures.

    python benchmarks/device_vs_report.py --measured benchmarks/results/keras_jax_steps_h200.json --device H200-SXM

Captures are cached under tmp/device_graphs (git-ignored), keyed as benchmarks/zoo.py keys its own.  Writes
benchmarks/results/keras_jax_steps_h200.md and .json (for H200-SXM; ``--out``).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from zoo import BATCH_SIZES, MODELS_DIR, capture_code_digest, machine  # noqa: E402

from autodist.graph.item import GraphItem  # noqa: E402
from autodist.graph.rebatch import at_batch  # noqa: E402
from autodist.io import write_json_atomic, write_text_atomic  # noqa: E402
from autodist.resource_spec import load_cluster  # noqa: E402
from cost_models.gpu import GpuKernelParams, job_step  # noqa: E402
from cost_models.step_table import step_table  # noqa: E402

CACHE = os.path.join(REPO, "tmp", "device_graphs")
MIXED = "mixed_float16"


def _run(command):
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip().splitlines()[-1:]}")
    return done.stdout


def captured(model, policy):
    """The zoo model's graph, captured by ``autodist capture`` at the zoo's small batch (cached)."""
    mixed = ["--mixed-precision"] if policy == MIXED else []
    path = os.path.join(CACHE, f"{model}{'-mixed' if mixed else ''}_{capture_code_digest()}.json")
    if not os.path.exists(path):
        os.makedirs(CACHE, exist_ok=True)
        _run(["autodist", "capture", os.path.join(MODELS_DIR, f"{model}.py"), "-o", path, "--",
              "--steps", "1", "--batch-size", str(BATCH_SIZES[model]), *mixed])
    return path


def one_gpu_cluster(device):
    path = os.path.join(CACHE, f"one-{device}.yaml")
    os.makedirs(CACHE, exist_ok=True)
    write_text_atomic(path, f"name: one-gpu\nnodes:\n  - name: gpu\n    count: 1\n    gpus: {{model: {device}, count: 1}}\n")
    return path


def predicted(row, cluster):
    """``placement report``'s throughput, peak memory and precision for the measured row's job."""
    command = ["placement", "report", captured(row["model"], row["policy"]), "--cluster", cluster,
               "--global-batch", str(row["batch"]), "--moves", "1", "--format", "json"]
    report = json.loads(_run(command))
    plan = report["plan"]
    return {"command": " ".join(os.path.relpath(c, REPO) if os.path.isabs(c) else c for c in command),
            "samples_per_s": plan["samples_per_s"], "peak_bytes": max(plan["memory"]["peak_bytes"].values()),
            "precision": report["costs"]["precision"], "xla": report["costs"]["xla"],
            "flops_per_step": report["job"]["flops_per_step"]}


KERNEL_CLASSES = ("conv", "matmul", "memory")
# cuDNN's convolution kernels (XLA names their ops cudnn-conv*; inside a CUDA graph only the kernel's name says),
# then cuBLAS' and Triton's matrix products; every other kernel is memory-bound (XLA's loop and reduction fusions,
# copies, memsets).
CONV_KERNEL = re.compile(r"fprop|dgrad|wgrad|cudnn|implicit_gemm")
MATMUL_KERNEL = re.compile(r"nvjet|gemm|cublas|cutlass")


def traced_class(kernel):
    """The kernel class (:data:`KERNEL_CLASSES`) of one traced kernel name and its stats."""
    if str(kernel["stats"].get("hlo_op", "")).startswith("cudnn-conv") or CONV_KERNEL.search(kernel["name"]):
        return "conv"
    return "matmul" if MATMUL_KERNEL.search(kernel["name"]) else "memory"


def traced_kernels(profile):
    """Seconds per step of the traced GPU's kernels, by class, and in all (the device's busy time)."""
    out = dict.fromkeys(KERNEL_CLASSES, 0.0)
    busy = 0.0
    for line in profile["lines"].values():
        busy += line["busy_ns"]
        for kernel in line["names"]:
            out[traced_class(kernel)] += kernel["total_ns"]
    return {name: ns / 1e9 / profile["steps"] for name, ns in {**out, "busy": busy}.items()}


def modelled_kernels(row, cluster):
    """The GPU kernel model's seconds per kernel class for the measured row's job (the report's graph, batch,
    device and XLA setting), and its kernels' sum."""
    item = at_batch(GraphItem.load(captured(row["model"], row["policy"])), row["batch"])
    (device,) = load_cluster(cluster).compute_devices()
    step = job_step(step_table(item), item.job, device)
    kernel = step.kernel_seconds(GpuKernelParams.load())
    out = {"conv": kernel[step.conv].sum(), "matmul": kernel[step.compute & ~step.conv].sum(),
           "memory": kernel[step.memory].sum()}
    return {name: float(seconds) for name, seconds in {**out, "busy": kernel.sum()}.items()}


def kernel_markdown(rows):
    """The kernel-class table of the rows whose kernels were traced."""
    lines = ["", "## Kernel time by class", "",
             "Traced: the GPU's kernels over the traced steps (JAX's profiler, CUPTI), per step, classed by kernel "
             "name: cuDNN's convolutions, cuBLAS' and Triton's matrix products (attention's fused batched products "
             "among the memory-bound ones where Triton names them `fusion_N`), every other kernel memory-bound. "
             "Model: the GPU kernel model's kernel seconds of the same class for the report's step "
             "(`cost_models.gpu.GpuStep.kernel_seconds`, launch waits left out). Busy: all kernels; the step "
             "measured beyond it is the host's (Keras' JAX trainer dispatching each step, which the timing loop "
             "waits for).", "",
             "| configuration | class | traced ms | model ms | model vs traced |", "|---|---|---|---|---|"]
    for row in rows:
        traced, model = row["kernels"]["traced"], row["kernels"]["model"]
        for name in (*KERNEL_CLASSES, "busy"):
            if traced[name] or model[name]:
                ratio = f"{model[name] / traced[name] - 1:+.1%}" if traced[name] else "-"
                lines.append(f"| {row['config']} | {name} | {traced[name] * 1e3:.2f} | {model[name] * 1e3:.2f} | "
                             f"{ratio} |")
        lines.append(f"| {row['config']} | step (measured) | {row['median_step_s'] * 1e3:.2f} | "
                     f"{row['batch'] / row['predicted']['samples_per_s'] * 1e3:.2f} (report) | "
                     f"{row['batch'] / row['predicted']['samples_per_s'] / row['median_step_s'] - 1:+.1%} |")
    lines.append("")
    for name in ("conv", "matmul", "memory", "busy"):
        errors = sorted(r["kernels"]["model"][name] / r["kernels"]["traced"][name] - 1 for r in rows
                        if r["kernels"]["traced"][name] > 1e-3)
        if errors:
            lines.append(f"- {name}: model vs traced from {errors[0]:+.1%} to {errors[-1]:+.1%} "
                         f"(median {statistics.median(errors):+.1%}) over {len(errors)} configurations with over 1 ms "
                         f"of it.")
    return lines


def markdown(rows, args, gpu_line):
    gib = 2.0 ** 30
    profiled = f" --profile {rows[0]['kernels']['steps']}" if "kernels" in rows[0] else ""
    lines = [
        f"# The zoo's Keras models measured on one {args.device} beside `placement report`", "",
        f"Measured (on the lent device machine): `python3 benchmarks/device/keras_jax_steps.py "
        f"--timed {rows[0]['timed_steps']}{profiled} --out $OUT/keras_jax_steps.json` ({gpu_line}); "
        f"Keras {rows[0]['keras']}, JAX {rows[0]['jax']} (the device image "
        f"has no TensorFlow): the zoo's own model definitions and compile options, the step compiled by XLA as "
        f"Keras' JAX trainer always does (TensorFlow's Keras does the same for a default compile on a GPU), "
        f"float32 products on TF32 tensor cores (XLA's default, as TensorFlow's), median of "
        f"{rows[0]['timed_steps']} steps after {rows[0]['warmup_steps']} warm-up steps, one device-resident batch, "
        f"peak = JAX's peak_bytes_in_use.",
        f"Predicted: `python benchmarks/device_vs_report.py --measured {os.path.relpath(args.measured, REPO)} "
        f"--device {args.device}` ({machine()}), which runs the user's `autodist capture` and `placement report` "
        f"(command per row in the JSON).", "",
        "Validation only: nothing is fitted on these figures. The step is XLA's on both sides, but the kernels are "
        "JAX's lowering of the Keras graph, not TensorFlow's; how much of a difference is the frameworks' is not "
        "measured here. TFLOP/s: the report's FLOPs per step over the measured step time.", "",
        "| configuration | batch | precision | measured samples/s | report samples/s | report vs measured "
        "| measured TFLOP/s | measured peak | report peak |",
        "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        p = row["predicted"]
        lines.append(f"| {row['config']} | {row['batch']} | {p['precision']} | {row['samples_per_s']:.0f} | "
                     f"{p['samples_per_s']:.0f} | {p['samples_per_s'] / row['samples_per_s'] - 1:+.1%} | "
                     f"{p['flops_per_step'] / row['median_step_s'] / 1e12:.0f} | "
                     f"{row['peak_bytes'] / gib:.1f} GiB | {p['peak_bytes'] / gib:.1f} GiB |")
    errors = sorted(abs(r["predicted"]["samples_per_s"] / r["samples_per_s"] - 1) for r in rows)
    lines += ["", f"Median |error| {errors[len(errors) // 2]:.1%}, worst {errors[-1]:.1%} over {len(rows)} "
                  f"configurations."]
    traced = [row for row in rows if "kernels" in row]
    if traced:
        lines += kernel_markdown(traced)
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--measured", required=True, help="keras_jax_steps.py's JSON")
    parser.add_argument("--device", required=True, help="the preset device model measured, e.g. H200-SXM")
    parser.add_argument("--gpu-line", default="", help="what nvidia-smi said of the measured GPU")
    parser.add_argument("--out", help="stem of the .md and .json written (default: "
                                          "benchmarks/results/keras_jax_steps_<gpu>, e.g. _h200 for H200-SXM)")
    args = parser.parse_args()
    args.out = args.out or os.path.join(REPO, "benchmarks", "results",
                                        f"keras_jax_steps_{args.device.split('-')[0].lower()}")
    with open(args.measured) as f:
        rows = [row for row in json.load(f) if "error" not in row]
    cluster = one_gpu_cluster(args.device)
    for row in rows:
        row["predicted"] = predicted(row, cluster)
        profile = row.pop("profile", None)
        if profile:
            row["kernels"] = {"steps": profile["steps"], "traced": traced_kernels(profile),
                              "model": modelled_kernels(row, cluster)}
        print(row["config"], f"measured {row['samples_per_s']:.0f}", f"report {row['predicted']['samples_per_s']:.0f}",
              flush=True)
    write_json_atomic(args.out + ".json", {"device": args.device, "gpu": args.gpu_line, "rows": rows})
    write_text_atomic(args.out + ".md", markdown(rows, args, args.gpu_line))


if __name__ == "__main__":
    main()
