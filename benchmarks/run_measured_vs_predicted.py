"""Measured versus predicted step time of `autodist run` on this machine.

For each model script: `autodist run SCRIPT --preset cpu-local:2` searches a
plan (real capture, cost model and search), starts every task as a local
TensorFlow process and trains; the run record gives the
median measured step time (first step, which traces, left out) next to the
plan's predicted step time.  Then the README's first command, as a new user
runs it (`autodist run benchmarks/models/mlp.py --preset cpu-local:2 -- --steps
200`, default search budget), several times, with the load average before each
run: its target is a measured step within 25% of the prediction.

    python benchmarks/run_measured_vs_predicted.py [--budget 2] [--readme-runs 5]

Writes benchmarks/results/run_measured_vs_predicted.json and .md.
"""

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from autodist.io import write_json_atomic, write_text_atomic  # noqa: E402

RESULTS = os.path.join(REPO, "benchmarks", "results")
PRESET = "cpu-local:2"
# script -> its arguments (enough steps for a stable median)
JOBS = {
    "run_small_mlp": ["--steps", "40", "--batch-size", "16"],
    "mlp": ["--steps", "30", "--batch-size", "64"],
    "transformer_lm": ["--steps", "8", "--batch-size", "4"],  # a custom loop: all-allreduce, on collectives
}
README_JOB = ("mlp", ["--steps", "200"])  # the README's first command
README_TARGET = 0.25


def run_job(name, script_args, budget, folder):
    """One ``autodist run`` of zoo script ``name`` (``budget``: seconds of search; None: the default)."""
    plan_path = os.path.join(folder, f"{name}.plan.json")
    report_path = os.path.join(folder, f"{name}.report.json")
    script = os.path.join(REPO, "benchmarks", "models", f"{name}.py")
    searched = [] if budget is None else ["--budget", str(budget)]
    argv = [sys.executable, "-m", "autodist", "run", script, "--preset", PRESET, *searched,
            "-o", plan_path, "--report", report_path, "--", *script_args]
    subprocess.run(argv, check=True, cwd=REPO, stdout=subprocess.DEVNULL)
    with open(report_path) as fh:
        report = json.load(fh)
    with open(plan_path) as fh:
        plan = json.load(fh)
    methods = {}
    for entry in plan["variables"]:
        methods[entry["method"]] = methods.get(entry["method"], 0) + 1
    return {
        "model": name,
        "script_args": script_args,
        "tasks": {job: sum(t["job"] == job for t in plan["tasks"]) for job in ("chief", "worker", "ps")},
        "variables_by_method": methods,
        "runs_on": "collective ops" if "collectives" in report else "one client",
        "steps": report["steps"],
        "measured_step_ms": round(report["measured_step_time"] * 1e3, 3),
        "predicted_step_ms": round(report["predicted_step_time"] * 1e3, 3),
        "measured_over_predicted": round(report["measured_step_time"] / report["predicted_step_time"], 2),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=2.0, help="search budget per plan, seconds")
    parser.add_argument("--readme-runs", type=int, default=5, help="runs of the README's first command")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rows = [run_job(name, script_args, args.budget, folder) for name, script_args in JOBS.items()]
        readme = []
        for _ in range(args.readme_runs):
            load = os.getloadavg()[0]
            readme.append(dict(run_job(*README_JOB, None, folder), load_before=round(load, 2)))
    within = sum(abs(r["measured_step_ms"] / r["predicted_step_ms"] - 1) <= README_TARGET for r in readme)
    result = {
        "command": "python benchmarks/run_measured_vs_predicted.py " + shlex.join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
                   f"load average {os.getloadavg()[0]:.1f} at the end",
        "preset": PRESET,
        "rows": rows,
        "readme_first_command": {"command": "autodist run benchmarks/models/mlp.py --preset cpu-local:2 -- --steps 200",
                                 "runs": readme, "within_25_percent": within, "target": README_TARGET},
    }
    write_json_atomic(os.path.join(RESULTS, "run_measured_vs_predicted.json"), result)
    lines = [f"# autodist run: measured vs predicted step time ({PRESET})", "", f"`{result['command']}`  ",
             f"machine: {result['machine']}", "",
             "| model | tasks | variables | runs on | measured ms | predicted ms | ratio |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        tasks = ", ".join(f"{n} {j}" for j, n in r["tasks"].items() if n)
        variables = ", ".join(f"{n} {m}" for m, n in sorted(r["variables_by_method"].items()))
        lines.append(f"| {r['model']} | {tasks} | {variables} | {r['runs_on']} | {r['measured_step_ms']} "
                     f"| {r['predicted_step_ms']} "
                     f"| {r['measured_over_predicted']} |")
    lines += ["", f"README's first command, `{result['readme_first_command']['command']}`: measured within 25% of "
              f"the prediction in {within} of {len(readme)} runs", "",
              "| run | load average before | measured ms | predicted ms | ratio |", "|---|---|---|---|---|"]
    lines += [f"| {i} | {r['load_before']} | {r['measured_step_ms']} | {r['predicted_step_ms']} "
              f"| {r['measured_over_predicted']} |" for i, r in enumerate(readme, start=1)]
    write_text_atomic(os.path.join(RESULTS, "run_measured_vs_predicted.md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
