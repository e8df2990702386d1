"""``placement report`` on every zoo model with every preset.

For each (model, preset) cell it runs the real ``placement report`` command in
this process, as text and as JSON with the same seed, and records whether it
succeeded, the widest text line (must be at most 100), whether the JSON
validates against ``autodist/schemas/report.schema.json``, the plan's
predicted step time, replicas and weak-scaling efficiency (over one device
running one replica's share alone) and the bottleneck sentence.

    python benchmarks/report_zoo.py [--budget 1] [--models mlp resnet50 ...]

Writes benchmarks/results/report_zoo.json and report_zoo.md.
"""

import argparse
import contextlib
import io
import json
import os
import shlex
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

import jsonschema  # noqa: E402
from zoo import BATCH_SIZES, graph_file, machine  # noqa: E402

from autodist.cli import placement_main  # noqa: E402
from autodist.io import write_json_atomic, write_text_atomic  # noqa: E402
from autodist.report import schema  # noqa: E402
from autodist.resource_spec.presets import MACHINES  # noqa: E402

RESULTS = os.path.join(REPO, "benchmarks", "results")
NODES = {"cpu-local": 2}


def report(argv):
    """Run ``placement report`` in-process; returns (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            placement_main(argv)
        except SystemExit as exit_info:
            status = exit_info.code
    return status, out.getvalue(), err.getvalue()


def run_cell(path, preset, budget):
    args = ["report", path, "--preset", preset, "--budget", str(budget)]
    started = time.perf_counter()
    status, text, err = report(args)
    seconds = time.perf_counter() - started
    cell = {"preset": preset, "status": status, "seconds": round(seconds, 2)}
    if status != 0:
        cell["error"] = err.strip()
        return cell
    status, out, err = report(args + ["--format", "json"])
    doc = json.loads(out)
    try:
        jsonschema.validate(doc, schema())
        valid = True
    except jsonschema.ValidationError as exc:
        valid = f"{list(exc.absolute_path)}: {exc.message}"
    cell.update(
        widest_line=max(len(line) for line in text.splitlines()),
        schema_valid=valid,
        step_time_ms=round(doc["plan"]["step_time"] * 1e3, 4),
        replicas=doc["plan"]["replicas"],
        efficiency=round(doc["scaling"]["efficiency"], 4) if doc["scaling"] else None,
        best_baseline=doc["plan"]["best_baseline"],
        sentence=doc["bottleneck"]["sentence"],
    )
    return cell


def markdown(doc):
    lines = [
        "# placement report on the zoo",
        "",
        f"Command: `{doc['command']}`  ",
        f"Machine: {doc['machine']}",
        "",
        "| model | preset | status | widest line | schema | step ms | replicas | efficiency | report s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in doc["cells"]:
        lines.append(
            f"| {c['model']} | {c['preset']} | {c['status']} | {c.get('widest_line', '-')} | "
            f"{'valid' if c.get('schema_valid') is True else c.get('schema_valid', '-')} | "
            f"{c.get('step_time_ms', '-')} | {c.get('replicas', '-')} | "
            f"{'-' if c.get('efficiency') is None else format(c['efficiency'], '.1%')} | {c['seconds']} |"
        )
    lines += ["", doc["summary"], ""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=1.0, help="search budget per report, seconds")
    parser.add_argument("--models", nargs="+", default=list(BATCH_SIZES), choices=list(BATCH_SIZES))
    args = parser.parse_args(argv)
    doc = {
        "command": "python benchmarks/report_zoo.py " + shlex.join(argv if argv is not None else sys.argv[1:]),
        "machine": machine(),
        "cells": [],
    }
    presets = [f"{name}:{NODES.get(name, 4)}" for name in MACHINES]
    for model in args.models:
        path = graph_file(model)
        for preset in presets:
            cell = run_cell(path, preset, args.budget)
            doc["cells"].append({"model": model, **cell})
            print(model, preset, cell["status"], cell.get("widest_line"), cell.get("schema_valid"), flush=True)
    ok = [c for c in doc["cells"] if c["status"] == 0 and c["widest_line"] <= 100 and c["schema_valid"] is True]
    doc["summary"] = (
        f"{len(ok)} of {len(doc['cells'])} reports ran, fit 100 columns and validate against the schema."
    )
    write_json_atomic(os.path.join(RESULTS, "report_zoo.json"), doc)
    write_text_atomic(os.path.join(RESULTS, "report_zoo.md"), markdown(doc))
    print(doc["summary"])
    return 0 if len(ok) == len(doc["cells"]) else 1


if __name__ == "__main__":
    sys.exit(main())
