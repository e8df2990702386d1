"""Evaluate the cost models on the shipped data; compare estimator variants.

Per-op MAPE on held-out rows (ops >= 50 us), leave-one-zoo-model-out step
error (against the default executor's step), the predicted allreduce bus
bandwidth of the 8-GPU H100/A100 presets against nccl-tests, the GPU kernel
model against the published single-GPU figures (``gpu_published``), and how
long ``CostModel.op_costs`` takes on the largest zoo graphs (on a CPU and on
an H100).  Writes
benchmarks/results/costmodel_eval.json.

    python benchmarks/costmodel_eval.py [--out PATH]
    python benchmarks/costmodel_eval.py --section cluster_published   # recompute one section of the file
    python benchmarks/costmodel_eval.py --section cluster_published --refit-overlap   # refit, ship, then recompute
"""

import argparse
import json
import os
import shlex
import sys
import time

from autodist.io import write_json_atomic
from cost_models.profiling.transfers import machine_description
from cost_models.fitting.dataset import read_meta, read_timings
from cost_models.fitting.evaluation import (SECTIONS, evaluate, evaluate_section, format_report, leave_one_model_out,
                                            op_holdout, section_lines)
from cost_models.model import DEFAULT_PARAMS, TIMINGS, TIMINGS_META, CostModel, profiled_cores
from placement.baselines import AllreducePricer
from targets import meets, step_target, target_lines

HERE = os.path.dirname(os.path.abspath(__file__))
ZOO = os.path.join(HERE, "models")
ESTIMATORS = {
    "hist, roofline ratio (default)": dict(DEFAULT_PARAMS, estimator="hist", target="roofline_ratio"),
    "hist, log seconds": dict(DEFAULT_PARAMS, estimator="hist", target="seconds"),
    "gbr, roofline ratio": dict(DEFAULT_PARAMS, estimator="gbr", target="roofline_ratio"),
}
TIMED_GRAPHS = (("resnet50.py", ["--batch-size", "4"]), ("bert_base.py", ["--batch-size", "2"]))


def compare_estimators():
    """Held-out per-op error and leave-one-model-out step error of each variant on the same data."""
    timings = read_timings(TIMINGS)
    meta = read_meta(TIMINGS_META)
    out = {}
    for name, params in ESTIMATORS.items():
        start = time.perf_counter()
        ops = op_holdout(timings, params)
        step = step_target(leave_one_model_out(timings, meta.get("steps", {}), params, profiled_cores(meta)))
        out[name] = {"params": params, "mape": ops["mape"], "median_ape": ops["median_ape"],
                     "step_mean_error": step["mean_error"], "step_max_error": step["max_error"],
                     "fit_and_predict_seconds": time.perf_counter() - start}
        print(f"{name}: held-out MAPE {ops['mape'] * 100:.1f}% (median {ops['median_ape'] * 100:.1f}%), "
              f"step error mean {step['mean_error'] * 100:.1f}% max {step['max_error'] * 100:.1f}%, "
              f"{out[name]['fit_and_predict_seconds']:.0f} s")
    return out


def time_op_costs():
    """Seconds of one ``op_costs`` call on large captured zoo graphs (CPU device)."""
    from autodist.graph.capture import capture_script
    from autodist.resource_spec import load_cluster

    cm = CostModel.default()
    devices = {"CPU": load_cluster(preset="cpu-local").devices("CPU")[0], "GPU": load_cluster(preset="dgx-h100").gpus()[0]}
    out = {}
    for script, args in TIMED_GRAPHS:
        item = capture_script(os.path.join(ZOO, script), args)
        entry = out[item.job.model_name] = {"ops": len(item.ops)}
        for kind, device in devices.items():
            cm.op_costs(item, device)
            start = time.perf_counter()
            cm.op_costs(item, device)
            seconds = time.perf_counter() - start
            entry["op_costs_seconds" if kind == "CPU" else "gpu_op_costs_seconds"] = seconds
            print(f"op_costs on {item.job.model_name} ({len(item.ops)} ops), {device.model}: {seconds:.3f} s")
    return out


def update_section(path, name):
    """Recompute section ``name`` of the evaluation recorded in ``path``, keeping the rest of the file."""
    with open(path) as f:
        result = json.load(f)
    section = evaluate_section(name, AllreducePricer)
    print("\n".join(section_lines(name, section)))
    result["evaluation"][name] = section
    result["meets"] = meets(result["evaluation"])
    print("\n".join(target_lines(result["evaluation"])))
    result.setdefault("sections_updated", {})[name] = {"command": "python " + " ".join(
        shlex.quote(a) for a in [os.path.relpath(__file__)] + sys.argv[1:]), "machine": machine_description()}
    write_json_atomic(path, result)
    print(f"-> {path}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "results", "costmodel_eval.json"))
    parser.add_argument("--section", choices=SECTIONS, default=None,
                        help="recompute only this section and replace it in the existing --out file")
    parser.add_argument("--refit-overlap", action="store_true",
                        help="first refit NCCL's overlap constants on the multi-GPU rows and ship them "
                             "(cost_models.fitting.cluster_published.write_shipped); the evaluation after it reuses "
                             "the refit's simulations")
    args = parser.parse_args(argv)
    if args.refit_overlap:
        from cost_models.fitting.cluster_published import write_shipped

        print(write_shipped(AllreducePricer, "python " + " ".join(
            shlex.quote(a) for a in [os.path.relpath(__file__)] + sys.argv[1:])))
    if args.section:
        return update_section(args.out, args.section)
    report = evaluate(AllreducePricer)
    print(format_report(report))
    print("\n".join(target_lines(report)))
    result = {
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__)] + sys.argv[1:]),
        "machine": machine_description(),
        "evaluation": report,
        "meets": meets(report),
        "estimators": compare_estimators(),
        "op_costs_timing": time_op_costs(),
    }
    write_json_atomic(args.out, result)
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
