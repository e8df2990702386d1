"""Plans for the zoo on the presets, emitted as TFJob and MPIJob and validated.

For every (zoo model, cluster preset) cell: search a plan (placement.optimize),
build it (autodist.plan.Plan), emit the TFJob (and the MPIJob when the plan is
allreduce only), gang-scheduled by Volcano, and validate every object strictly
(CRD schemas, core pod schema, operator rules).  Records the plan's tasks,
predicted step time, plan size and emission time per cell.

Each model is captured once in a fresh process and cached (``benchmarks/zoo.py``).

    python benchmarks/plan_emit_zoo.py [--budget 2] [--models mlp resnet50 ...]

Writes benchmarks/results/plan_emit_zoo.json and plan_emit_zoo.md.
"""

import argparse
import os
import shlex
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from zoo import BATCH_SIZES as MODELS  # noqa: E402
from zoo import captured, machine  # noqa: E402

from autodist.errors import AutoDistError  # noqa: E402
from autodist.io import write_json_atomic, write_text_atomic  # noqa: E402

RESULTS = os.path.join(REPO, "benchmarks", "results")
PRESETS = ["dgx-h100:2", "dgx-a100:4", "p4d.24xlarge:2", "p3.16xlarge:2", "g4dn.12xlarge:4", "cpu-2s-25g:2"]


def run_cell(graph, preset, cost_model, budget_s):
    from launcher.manifests import build_manifests
    from launcher.options import EmitOptions
    from placement import optimize

    from autodist.plan import Plan
    from autodist.resource_spec import load_cluster

    spec = load_cluster(preset=preset)
    result = optimize(graph, spec, cost_model, seed=0, budget_s=budget_s)
    plan = Plan.build(graph, spec, result, cost_model.id, 0)
    cell = {
        "preset": preset,
        "tasks": {job: len(plan.tasks_of(job)) for job in ("chief", "worker", "ps") if plan.tasks_of(job)},
        "inter_node": plan.collectives["inter_node"],
        "predicted_step_ms": round(plan.prediction["step_time"] * 1e3, 4),
        "plan_bytes": len(plan.to_json().encode()),
        "emitted": {},
    }
    # An MPIJob runs one worker template (the same GPUs in every worker), and no PS.
    not_mpijob = None
    if plan.has_ps():
        not_mpijob = "PS plan"
    elif len({len(task["devices"]) for task in plan.tasks_of("worker")}) > 1:
        not_mpijob = "workers hold different GPU counts"
    cell["not_emitted"] = {"mpijob": not_mpijob} if not_mpijob else {}
    for fmt in ["tfjob"] if not_mpijob else ["tfjob", "mpijob"]:
        start = time.perf_counter()
        try:
            objects = build_manifests(plan, fmt, EmitOptions(gang="volcano"))
            outcome = {"valid": True, "objects": [o["kind"] for o in objects]}
        except AutoDistError as exc:
            outcome = {"valid": False, "error": str(exc)}
        outcome["seconds"] = round(time.perf_counter() - start, 3)
        cell["emitted"][fmt] = outcome
    return cell


def markdown(doc):
    lines = [
        "# Zoo plans emitted as Kubernetes manifests",
        "",
        f"Command: `{doc['command']}`  ",
        f"Machine: {doc['machine']}  ",
        f"Search budget per cell: {doc['budget_s']} s; every object validated strictly before counting as valid.",
        "",
        "| model | preset | tasks | inter-node | predicted step (ms) | plan (bytes) | TFJob | MPIJob |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in doc["cells"]:
        tasks = ", ".join(f"{n} {j}" for j, n in row["tasks"].items())
        cols = []
        for fmt in ("tfjob", "mpijob"):
            out = row["emitted"].get(fmt)
            if out is None:
                cols.append(f"n/a ({row['not_emitted'][fmt]})")
            else:
                cols.append("valid" if out["valid"] else f"INVALID: {out['error']}")
        lines.append(
            f"| {row['model']} | {row['preset']} | {tasks} | {row['inter_node']} | {row['predicted_step_ms']} "
            f"| {row['plan_bytes']} | {cols[0]} | {cols[1]} |"
        )
    valid = sum(o["valid"] for row in doc["cells"] for o in row["emitted"].values())
    total = sum(len(row["emitted"]) for row in doc["cells"])
    lines += ["", f"{valid} of {total} emitted jobs valid."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--budget", type=float, default=2.0, help="search budget per cell, seconds")
    args = parser.parse_args(argv)
    from cost_models import CostModel

    cost_model = CostModel.default()
    cells = []
    for name in args.models:
        graph = captured(name)
        for preset in PRESETS:
            cell = {"model": name, **run_cell(graph, preset, cost_model, args.budget)}
            cells.append(cell)
            print(f"{name:15s} {preset:18s} {cell['tasks']} {cell['emitted']}", flush=True)
    doc = {
        "command": "python " + " ".join(shlex.quote(a) for a in ["benchmarks/plan_emit_zoo.py", *(argv or sys.argv[1:])]),
        "machine": machine(),
        "budget_s": args.budget,
        "cells": cells,
    }
    write_json_atomic(os.path.join(RESULTS, "plan_emit_zoo.json"), doc)
    write_text_atomic(os.path.join(RESULTS, "plan_emit_zoo.md"), markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
