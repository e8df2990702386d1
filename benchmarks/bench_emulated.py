"""Measured against predicted step time on emulated clusters: the zoo's models, every strategy, three link rates.

For each model (captured once) and each cluster (``emu-100mbit:2``,
``emu-1gbit:2``, ``emu-10gbit:2``: two nodes of one core each, joined by a
shaped link), the searched plan and every baseline run as a plan, with the
launcher of ``autodist run`` (what ``autodist bench`` does), for real on the
emulated cluster; a strategy's measured step time is the median of its run's
last steps (:func:`run_length`: a fast strategy's steps 101-200, after
TensorFlow's executor has settled, as profiling and ``autodist run`` time
them; a slower one's last two thirds of about RUN_SECONDS).  Per cell: every strategy's error
(measured / predicted - 1), the pairwise ranking agreement over the pairs
whose measured times differ by more than 10%, and whether the plan was the
measured fastest (and within 5% of it).  The held-out case
(:data:`HELD_OUT`, a plain ``tf.function`` loop run unchanged) runs on
one cluster and is listed apart, outside those statistics.  Needs root
(network namespaces).

The op costs are first profiled here, as a user profiles their own machine:
the models' rows of the shipped timings are replaced by a fresh profile
(``autodist profile ops --add``, :func:`profile_here`).  This VM's speed
differs between sessions by more than any other error measured here (a
128 MB variable copy: 10.6 ms in the shipped profile, 73 ms in a session a
day later); ``--ops shipped`` prices with the shipped timings instead.

    python benchmarks/bench_emulated.py [--models mlp,small_cnn] [--clusters emu-1gbit:2] [--budget 2] [--ops shipped]

Writes benchmarks/results/bench_emulated.json and .md; a run of fewer
models or clusters than all is marked partial in both.
"""

import argparse
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from autodist.errors import AutoDistError  # noqa: E402
from autodist.io import write_json_atomic, write_text_atomic  # noqa: E402

RESULTS = os.path.join(REPO, "benchmarks", "results")
MODELS_DIR = os.path.join(REPO, "benchmarks", "models")
CLUSTERS = ("emu-100mbit:2", "emu-1gbit:2", "emu-10gbit:2")
# A strategy predicted to train SETTLED_STEPS steps within RUN_SECONDS trains that many and is timed on the
# last SETTLED_STEPS - EXECUTOR_SETTLE_RUNS (cost_models.executor); a slower one trains for about RUN_SECONDS,
# at least MIN_STEPS steps, and is timed on the last two thirds of them.
SETTLED_STEPS = 200
RUN_SECONDS = 10.0
MIN_STEPS = 6
# Model script -> its arguments, small enough that the whole benchmark takes about 20 minutes on 2 cores.
MODELS = {
    "mlp": ["--batch-size", "64"],
    "wide_deep": ["--batch-size", "256", "--rows", "100000"],  # sparse embeddings, 3.3M rows x 33 columns in all
    "transformer_lm": ["--batch-size", "4"],
    "small_cnn": ["--batch-size", "64"],
    "custom_loop": ["--batch-size", "64"],
}
# The held-out case, run on one cluster and reported apart from the statistics: a plain tf.function loop over raw
# tf.Variables with a Keras optimizer, with nothing of autodist in it, captured, planned and run unchanged.
HELD_OUT = {"custom_loop": "emu-1gbit:2"}
PROFILE_STEPS = 10  # profiled steps per model (more for a fast one, to span seconds), as the shipped profile
DIFFERENT = 1.10  # pairs whose measured times differ by more than this factor count for the ranking agreement
NEAR_BEST = 1.05  # the plan is "within 5%" of the best measured strategy


def run_length(predicted_step_time):
    """(steps to train, last steps to measure) for a strategy predicted at ``predicted_step_time`` seconds."""
    from cost_models.executor import EXECUTOR_SETTLE_RUNS

    if SETTLED_STEPS * predicted_step_time <= RUN_SECONDS:
        return SETTLED_STEPS, SETTLED_STEPS - EXECUTOR_SETTLE_RUNS
    steps = max(MIN_STEPS, math.ceil(RUN_SECONDS / predicted_step_time))
    return steps, steps * 2 // 3


def _script_args(model, steps=MIN_STEPS):
    return [*MODELS[model], "--steps", str(steps)]


def run_cell(model, graph_item, cluster, budget, cost_model, folder):
    """Every strategy of one (model, cluster) cell: its row, with the error and the cell's agreement."""
    from autodist.cli.bench_cmd import (DEFAULT_STRATEGIES, add_ranks, measured_times, run_strategy,
                                        runtime_program, strategy_plans, strategy_row)
    from autodist.resource_spec import load_cluster

    spec = load_cluster(preset=cluster)
    script = os.path.join(MODELS_DIR, f"{model}.py")
    rows, ran = [], {}  # ran: runtime program -> (the strategy that ran it, its step times, why it failed)
    for name, plan, why_not in strategy_plans(graph_item, spec, DEFAULT_STRATEGIES, cost_model, budget_s=budget):
        times, failed, first = None, None, None
        path = os.path.join(folder, f"{model}-{cluster.replace(':', '-')}-{name}.json")
        if plan is not None and runtime_program(plan.strategy, spec) in ran:
            first, times, failed = ran[runtime_program(plan.strategy, spec)]
        elif plan is not None:
            plan.save(path)
            try:
                steps, measured = run_length(float(plan.prediction["step_time"]))
                record = run_strategy(name, plan, path, script, _script_args(model, steps), folder, join_timeout=300)
                times = measured_times(record, measured, name)
            except AutoDistError as exc:  # one strategy that cannot run does not stop the benchmark
                failed = str(exc)
            ran[runtime_program(plan.strategy, spec)] = (name, times, failed)
        row = strategy_row(name, plan, None, why_not, times, first)
        if failed:
            row["failed"] = failed
        row.pop("plan")
        row["error"] = (row["measured_over_predicted"] - 1) if row["measured_over_predicted"] else None
        rows.append(row)
    return cell_summary(model, cluster, add_ranks(rows))


def cell_summary(model, cluster, rows):
    """The cell's rows with its pairwise ranking agreement and how the plan did against the best."""
    ran = [r for r in rows if r["measured_step_time"]]
    pairs = agreed = 0
    for i, a in enumerate(ran):
        for b in ran[i + 1:]:
            slow, fast = max(a, b, key=_measured), min(a, b, key=_measured)
            if _measured(slow) > DIFFERENT * _measured(fast):
                pairs += 1
                agreed += slow["predicted_step_time"] > fast["predicted_step_time"]
    measured = {r["name"]: r["measured_step_time"] for r in ran}
    best = min(measured.values()) if measured else None
    plan = measured.get("plan")
    return {
        "model": model, "cluster": cluster, "strategies": rows,
        "pairs_differing": pairs, "pairs_agreeing": agreed,
        "plan_over_best": plan / best if plan and best else None,
        "plan_measured_fastest": bool(plan) and plan == best,
        "plan_within_5pct_of_best": bool(plan) and plan <= NEAR_BEST * best,
        "ring_over_plan": measured["ring"] / plan if plan and "ring" in measured else None,
    }


def _measured(row):
    return row["measured_step_time"]


def summary(cells):
    errors = [abs(r["error"]) for c in cells for r in c["strategies"]
              if r["error"] is not None and not r.get("same_run_as")]  # each run once
    pairs = sum(c["pairs_differing"] for c in cells)
    ring = [c["ring_over_plan"] for c in cells if c["ring_over_plan"]]
    return {
        "cells": len(cells),
        "runs": len(errors),
        "median_abs_error": statistics.median(errors) if errors else None,
        "worst_abs_error": max(errors) if errors else None,
        "pairwise_agreement": sum(c["pairs_agreeing"] for c in cells) / pairs if pairs else None,
        "pairs_differing": pairs,
        "cells_plan_within_5pct": sum(c["plan_within_5pct_of_best"] for c in cells),
        "cells_plan_fastest": sum(c["plan_measured_fastest"] for c in cells),
        "best_ring_over_plan": max(ring) if ring else None,
    }


def _f(value, scale=1.0, digits=2):
    return "-" if value is None else f"{value * scale:.{digits}f}"


def markdown(result):
    s = result["summary"]
    lines = ["# Measured vs predicted step time on emulated clusters", "",
             f"`{result['command']}`  ", f"machine: {result['machine']}  ",
             f"measured: the median of a run's steps 101-200 where the plan predicts 200 steps within "
             f"{RUN_SECONDS:g} s, else of the last two thirds of about {RUN_SECONDS:g} s (at least {MIN_STEPS} steps)  ",
             f"op costs: {result['op_costs']}", ""]
    if result["partial"]:
        lines += [f"**Partial run**: {', '.join(result['models'])} on {', '.join(result['clusters'])} only; "
                  "the full benchmark is `python benchmarks/bench_emulated.py`.", ""]
    lines += [f"- median |measured/predicted - 1|: {_f(s['median_abs_error'], 100, 1)}%, worst "
              f"{_f(s['worst_abs_error'], 100, 1)}% over {s['runs']} runs",
              f"- pairwise ranking agreement: {_f(s['pairwise_agreement'], 100, 1)}% of {s['pairs_differing']} "
              f"pairs whose measured times differ by more than 10%",
              f"- the plan within 5% of the best measured strategy in {s['cells_plan_within_5pct']} of "
              f"{s['cells']} cells (the fastest in {s['cells_plan_fastest']}); best ring / plan "
              f"{_f(s['best_ring_over_plan'])}x", ""] + _strategy_table(result["cells"])
    lines += ["", "| model | cluster | pairs agreeing | plan / best measured | plan fastest | ring / plan |",
              "|---|---|---|---|---|---|"]
    for c in result["cells"]:
        lines.append(f"| {c['model']} | {c['cluster']} | {c['pairs_agreeing']} of {c['pairs_differing']} "
                     f"| {_f(c['plan_over_best'])} | {'yes' if c['plan_measured_fastest'] else 'no'} "
                     f"| {_f(c['ring_over_plan'])} |")
    if result["held_out"]:
        lines += ["", "## Held-out case, not in the statistics above", "",
                  "A plain `tf.function` training loop over raw `tf.Variable`s with a Keras optimizer "
                  "(`benchmarks/models/custom_loop.py`, nothing of autodist in it), captured, planned and run "
                  "unchanged:", ""] + _strategy_table(result["held_out"])
    return "\n".join(lines) + "\n"


def _strategy_table(cells):
    lines = ["| model | cluster | strategy | measured ms | p25-p75 ms | steps timed | predicted ms | error "
             "| rank measured | rank predicted |", "|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        for r in c["strategies"]:
            note = r.get("skipped") or r.get("failed") or (
                f"the run of {r['same_run_as']}: the same program" if r.get("same_run_as") else None)
            lines.append(f"| {c['model']} | {c['cluster']} | {r['name']} | {_f(r['measured_step_time'], 1e3)} "
                         f"| {_f(r['measured_p25'], 1e3)}-{_f(r['measured_p75'], 1e3)} | {r.get('measured_steps') or '-'} "
                         f"| {_f(r['predicted_step_time'], 1e3)} | {_f(r['error'], 100, 1)}% "
                         f"| {r['measured_rank'] or '-'} | {r['predicted_rank'] or '-'} |"
                         + (f" {note} |" if note else ""))
    return lines


def _names(text, known):
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected some of {','.join(known)}, got {text!r}")
    return names


def profile_here(models, folder):
    """Profile ``models``' steps on this machine into ``folder``, beside the shipped timings of every other model,
    and refit (``autodist profile ops --add``), with the arguments they run with here: their steps are then
    timed whole at the batches their replicas run (cost_models.measured_steps)."""
    argv = [sys.executable, "-m", "autodist", "profile", "ops", "--no-micro", "--add", "--steps", str(PROFILE_STEPS),
            "--out", folder]
    for model in models:
        args = list(MODELS[model])
        batch = args.pop(args.index("--batch-size") + 1)
        args.remove("--batch-size")
        argv += ["--model", model, "--batch-size", batch, "--script-args", shlex.join(args)]
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"bench_emulated: profiling failed: {done.stderr.strip().splitlines()[-1]}")
    return " ".join(shlex.quote(a) for a in ["autodist", *argv[3:]])


def main():
    from autodist.api import graph_of
    from autodist.resource_spec import load_cluster
    from cost_models.model import load_cost_model
    from launcher.emulation import check_can_emulate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=lambda t: _names(t, list(MODELS)), default=list(MODELS))
    parser.add_argument("--clusters", type=lambda t: _names(t, CLUSTERS), default=list(CLUSTERS))
    parser.add_argument("--budget", type=float, default=2.0, help="search budget per plan, seconds")
    parser.add_argument("--ops", choices=("fresh", "shipped"), default="fresh",
                        help="op costs from a profile of the models taken first, here (default), or the shipped ones")
    args = parser.parse_args()
    try:
        check_can_emulate(load_cluster(preset=args.clusters[0]))
    except AutoDistError as exc:
        parser.exit(2, f"bench_emulated: error: {exc}\n")
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    cells = []
    with tempfile.TemporaryDirectory(prefix="bench-emulated-") as folder:
        ops = "the shipped op timings"
        if args.ops == "fresh":
            print(f"bench_emulated: profiling {', '.join(args.models)}", file=sys.stderr, flush=True)
            ops = f"profiled first, here: {profile_here(args.models, os.path.join(folder, 'ops'))}"
        cost_model = load_cost_model(os.path.join(folder, "ops") if args.ops == "fresh" else None)
        for model in args.models:
            graph_item = graph_of(os.path.join(MODELS_DIR, f"{model}.py"), _script_args(model))
            for cluster in [c for c in args.clusters if HELD_OUT.get(model, c) == c]:
                print(f"bench_emulated: {model} on {cluster}", file=sys.stderr, flush=True)
                cells.append(run_cell(model, graph_item, cluster, args.budget, cost_model, folder))
    scored = [c for c in cells if c["model"] not in HELD_OUT]
    result = {
        "command": "python benchmarks/bench_emulated.py " + shlex.join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, load average "
                   f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end",
        "partial": args.models != list(MODELS) or args.clusters != list(CLUSTERS),
        "op_costs": ops,
        "models": args.models,
        "clusters": args.clusters,
        "run_length": {"settled_steps": SETTLED_STEPS, "run_seconds": RUN_SECONDS, "min_steps": MIN_STEPS},
        "seconds": round(time.perf_counter() - started, 1),
        "summary": summary(scored),
        "cells": scored,
        "held_out": [c for c in cells if c["model"] in HELD_OUT],
    }
    write_json_atomic(os.path.join(RESULTS, "bench_emulated.json"), result)
    text = markdown(result)
    write_text_atomic(os.path.join(RESULTS, "bench_emulated.md"), text)
    print(text)


if __name__ == "__main__":
    main()
