"""Placement benchmark: baselines vs the annealed plan over zoo models and clusters.

Captures each zoo model once (cached by ``benchmarks/zoo.py``), then for every (model, cluster) cell runs ``placement.optimize``
and records each baseline's predicted step time, the annealed plan's, its
throughput gain over the best baseline (and over greedy PS), the gap to the
lower bound, the search time, moves per second and the acceptance at the
start and the end of the search; then the spread of seeds 0-4 on ResNet-50
on dgx-h100:4, and one search on a 1024-GPU cluster (ResNet-50 at 32 samples
a GPU).  ``--scale`` instead compares a 60 s and a 600 s search at 1024 GPUs.

    python benchmarks/placement_bench.py            # full run, writes results
    python benchmarks/placement_bench.py --quick    # mlp only, 1 s budget, no write
    python benchmarks/placement_bench.py --scale    # 60 s vs 600 s at 1024 GPUs, writes placement_scale.json
    python benchmarks/placement_bench.py --cells resnet50/dgx-h100:4 large   # rerun those, merged into results

``--cells`` reruns only the named cells (``MODEL/CLUSTER``, ``spread`` for
the seed spread, ``large`` for the 1024-GPU search) and replaces them in
the recorded results, keeping every other cell and recomputing the summary.

Writes benchmarks/results/placement.json and placement.md.
"""

import argparse
import json
import os
import shlex
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from autodist.io import write_json_atomic, write_text_atomic  # noqa: E402
from autodist.resource_spec import load_cluster  # noqa: E402
from placement.baselines import BASELINE_NAMES  # noqa: E402
from zoo import captured, machine  # noqa: E402

RESULTS = os.path.join(REPO, "benchmarks", "results")

# zoo script -> per-replica batch size captured
MODELS = {
    "mlp": 256,
    "resnet50": 32,
    "vgg16": 32,
    "inception_v3": 32,
    "bert_base": 8,
    "transformer_lm": 16,
    "wide_deep": 512,
}
CLUSTERS = {
    "dgx-h100:1": "1 node, 8x H100 SXM on NVLink/NVSwitch",
    "dgx-h100:4": "4 nodes of 8x H100, InfiniBand NDR (8 NICs/node, GPUDirect RDMA)",
    "dgx-a100:4": "4 nodes of 8x A100 80GB, InfiniBand HDR (8 NICs/node, GPUDirect RDMA)",
    "g4dn.12xlarge:16": "16 nodes of 4x T4 on PCIe, 50 GbE TCP",
    "p3.16xlarge:8": "8 nodes of 8x V100 16GB on NVLink, 25 GbE TCP (no RDMA)",
    "cpu-2s-25g:8": "8 CPU-only nodes (2x Xeon 8380), 25 GbE TCP",
}
LARGE = ("resnet50", "dgx-h100:128", "128 nodes of 8x H100 (1024 GPUs), InfiniBand NDR")
# The 1024-GPU search's global batch: 32 samples for each of the 1024 GPUs, so every replica count up to all of them
# is a real choice (at the zoo's captured 32, a plan could use at most 32 replicas).
LARGE_BATCH = 32 * 1024
SPREAD = ("resnet50", "dgx-h100:4")
SEEDS = range(5)


def run_cell(graph, preset, cost_model, budget_s, seed):
    from placement import optimize

    spec = load_cluster(preset=preset)
    result = optimize(graph, spec, cost_model, seed=seed, budget_s=budget_s)
    ours = result.simulation.step_time
    baselines = {c.name: c.simulation.step_time for c in result.candidates}
    fits = {c.name: c.simulation.fits for c in result.candidates}
    best_name = min(result.candidates, key=lambda c: (not c.simulation.fits, c.simulation.step_time)).name
    greedy = baselines.get("greedy-ps")  # None where the search leaves PS plans out (a custom training loop)
    best = baselines[best_name]
    methods = {}
    for s in result.strategy.sync.values():
        key = "ps" if s.method == "ps" else f"allreduce-{s.algorithm}"
        methods[key] = methods.get(key, 0) + 1
    return {
        "model": graph.job.model_name,
        "cluster": preset,
        "devices": len(result.strategy.replicas),
        "baseline_ms": {k: round(v * 1e3, 4) for k, v in baselines.items()},
        "baseline_fits": fits,
        "best_baseline": best_name,
        "annealed_ms": round(ours * 1e3, 4),
        "annealed_fits": result.simulation.fits,
        "lower_bound_ms": round(result.lower_bound * 1e3, 4),
        "gain_over_greedy": round(greedy / ours - 1, 4) if greedy else None,
        "left_out": result.stats.get("left_out"),
        "gain_over_best_baseline": round(best / ours - 1, 4),
        "gap_to_lower_bound": round(ours / result.lower_bound - 1, 4),
        "budget_s": budget_s,
        "search_s": round(result.stats["seconds"], 2),
        "setup_s": round(result.stats["setup_seconds"], 2),
        "moves_per_s": round(result.stats["moves_tried"] / max(result.stats["search_seconds"], 1e-9), 1),
        "moves_tried": result.stats["moves_tried"],
        # moves tried again from the same strategy reuse its simulation (placement.search.Annealer._round)
        "simulations": result.stats["evaluations"],
        "moves_accepted": result.stats["moves_accepted"],
        "acceptance_start": result.stats["acceptance_start"],
        "acceptance_end": result.stats["acceptance_end"],
        "sync_methods": dict(sorted(methods.items())),
        "ps_tasks": len(result.strategy.ps_devices),
    }


def markdown(report):
    lines = [
        "# Placement benchmark",
        "",
        f"Command: `{report['command']}`  ",
        f"Machine: {report['machine']}  ",
        f"Cost model: `{report['cost_model']}`; budget {report['budget_s']} s per cell, seed {report['seed']}.",
        "",
        "Predicted step times in ms; gain = throughput gain (baseline time / annealed time - 1).",
        "",
        f"| model | cluster | {' | '.join(BASELINE_NAMES)} | annealed | gain vs best | gain vs greedy "
        "| gap to bound | search s | moves/s | acceptance start / end |",
        "|---|---|" + "---|" * (len(BASELINE_NAMES) + 7),
    ]
    for c in report["cells"]:
        b = c["baseline_ms"]
        lines.append(
            f"| {c['model']} | {c['cluster']} | {' | '.join(_ms(b.get(name)) for name in BASELINE_NAMES)} "
            f"| {c['annealed_ms']:.3f} "
            f"| {c['gain_over_best_baseline']:.1%} | {_share(c['gain_over_greedy'], '.1%')} "
            f"| {c['gap_to_lower_bound']:.1%} | {c['search_s']:.1f} "
            f"| {c['moves_per_s']:.0f} | {_share(c['acceptance_start'])} / {_share(c['acceptance_end'])} |"
        )
    left_out = sorted({(c["model"], c["left_out"]) for c in report["cells"] if c.get("left_out")})
    lines += [f"\n{model}: left out by the search, so '-': {why}." for model, why in left_out]
    for rerun in report.get("reruns", []):
        lines += ["", f"Rerun `{rerun['command']}` on {rerun['machine']}: {', '.join(rerun['cells'])}."]
    s = report["summary"]
    lines += [
        "",
        f"Mean gain over greedy PS: {s['mean_gain_over_greedy']:.1%} over the {s['cells_with_greedy']} cells that "
        "have it (target >= 25%).  ",
        f"Cells worse than their best baseline: {s['cells_worse_than_best_baseline']} (target 0).  ",
        f"Mean gain over the best baseline: {s['mean_gain_over_best_baseline']:.1%}.  ",
        f"Max search time: {s['max_search_s']:.1f} s; ResNet-50 on dgx-a100:4: {s['resnet50_4x8_search_s']} s (target <= 10).",
    ]
    if report.get("spread"):
        p = report["spread"]
        lines += [
            "",
            f"Seeds 0-4, {p['model']} on {p['cluster']}: {', '.join(f'{t:.3f}' for t in p['annealed_ms'])} ms; "
            f"spread {p['spread']:.2%} (target < 1%).",
        ]
    if report.get("large"):
        g = report["large"]
        lines += [
            "",
            f"1024 GPUs ({LARGE[2]}), {g['model']} at a global batch of {LARGE_BATCH}: search {g['search_s']:.1f} s "
            f"(target <= 60), {g['devices']} replicas, {g['moves_per_s']:.0f} moves/s (target >= 200), "
            f"annealed {g['annealed_ms']:.3f} ms vs greedy {g['baseline_ms']['greedy-ps']:.3f} ms "
            f"(gain {g['gain_over_greedy']:.1%}), {g['moves_tried']} moves.",
        ]
    if report.get("throughput"):
        lines += _throughput(report["throughput"])
    return "\n".join(lines) + "\n"


def _throughput(t):
    """The section on search throughput: moves per CPU second of the search alone, before and after a change,
    measured in one run on one machine (recorded by hand in placement.json's ``throughput``)."""
    setup = all("setup_before" in r for r in t["rows"])
    lines = ["", "## Search throughput", "", f"Command: `{t['command']}`  ", f"Machine: {t['machine']}  ", t["note"], "",
             f"| model | cluster | GPUs | global batch | moves | {t['before']} moves/CPU s | {t['after']} moves/CPU s "
             "| speed-up |" + (f" {t['before']} set-up CPU s | {t['after']} set-up CPU s |" if setup else ""),
             "|---|---|---|---|---|---|---|---|" + ("---|---|" if setup else "")]
    for r in t["rows"]:
        lines.append(f"| {r['model']} | {r['cluster']} | {r['gpus']} | {r['batch']} | {r['moves']} "
                     f"| {_runs(r['before'], '.0f')} | {_runs(r['after'], '.0f')} "
                     f"| {min(r['after']) / max(r['before']):.2f}-{max(r['after']) / min(r['before']):.2f}x |"
                     + (f" {_runs(r['setup_before'], '.1f')} | {_runs(r['setup_after'], '.1f')} |" if setup else ""))
    return lines


def _runs(values, spec):
    return " / ".join(format(x, spec) for x in values)


def _share(value, spec=".0%"):
    return "-" if value is None else format(value, spec)


def _ms(value):
    return "-" if value is None else f"{value:.3f}"


def large_graph():
    """The LARGE model at LARGE_BATCH samples (the zoo's captured step, re-scaled)."""
    from autodist.graph.rebatch import at_batch

    model = LARGE[0]
    return at_batch(captured(model, MODELS[model]), LARGE_BATCH)


def seed_spread(cost_model, budget_s):
    """The annealed step of every seed of SEEDS on the SPREAD cell, and their spread (max / min - 1)."""
    model, preset = SPREAD
    graph = captured(model, MODELS[model])
    times = [run_cell(graph, preset, cost_model, budget_s, seed)["annealed_ms"] for seed in SEEDS]
    return {"model": model, "cluster": preset, "budget_s": budget_s, "seeds": list(SEEDS), "annealed_ms": times,
            "spread": round(max(times) / min(times) - 1, 5)}


def scale(cost_model, short_s, long_s, seed, argv):
    """A ``short_s`` and a ``long_s`` search at 1024 GPUs: does the short one come within 1%?"""
    graph = large_graph()
    runs = {f"{budget:g}s": run_cell(graph, LARGE[1], cost_model, budget, seed) for budget in (short_s, long_s)}
    short, long_ = (runs[f"{b:g}s"]["annealed_ms"] for b in (short_s, long_s))
    report = {
        "command": "python " + " ".join(shlex.quote(a) for a in ["benchmarks/placement_bench.py", *argv]),
        "machine": machine(),
        "cost_model": cost_model.id,
        "runs": runs,
        "short_over_long": round(short / long_ - 1, 5),
    }
    print(f"1024 GPUs: {short_s:g} s -> {short:.3f} ms, {long_s:g} s -> {long_:.3f} ms "
          f"({report['short_over_long']:+.2%}; target within 1%)")
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=10.0, help="search budget per cell, seconds")
    parser.add_argument("--large-budget", type=float, default=30.0, help="budget of the 1024-GPU search")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--models", nargs="*", default=list(MODELS))
    parser.add_argument("--quick", action="store_true", help="mlp only, 1 s budget, results not written")
    parser.add_argument("--cells", nargs="+", metavar="CELL",
                        help="rerun only these cells (MODEL/CLUSTER, spread, large) and merge them into the results")
    parser.add_argument("--scale", nargs=2, type=float, metavar=("SHORT_S", "LONG_S"),
                        help="only compare searches of SHORT_S and LONG_S seconds at 1024 GPUs (the target: 60 600)")
    args = parser.parse_args(argv)
    from cost_models import CostModel

    if args.scale:
        report = scale(CostModel.default(), *args.scale, args.seed, argv or sys.argv[1:])
        write_json_atomic(os.path.join(RESULTS, "placement_scale.json"), report)
        return 0
    if args.cells:
        return rerun_cells(CostModel.default(), args, argv or sys.argv[1:])

    models = ["mlp"] if args.quick else args.models
    budget = 1.0 if args.quick else args.budget
    cost_model = CostModel.default()
    report = {
        "command": "python " + " ".join(shlex.quote(a) for a in ["benchmarks/placement_bench.py", *(argv or sys.argv[1:])]),
        "machine": machine(),
        "cost_model": cost_model.id,
        "budget_s": budget,
        "seed": args.seed,
        "clusters": CLUSTERS,
        "cells": [],
    }
    for name in models:
        graph = captured(name, MODELS[name])
        for preset in CLUSTERS:
            report["cells"].append(printed_cell(graph, name, preset, cost_model, budget, args.seed))
    if not args.quick:
        report["spread"] = printed_spread(cost_model, budget)
        report["large"] = printed_large(cost_model, args.large_budget, args.seed)
    report["summary"] = summary(report["cells"])
    print(report["summary"])
    if not args.quick:
        write_results({**report, **_recorded_throughput()})
    return 0


def _recorded_throughput():
    """The search-throughput section recorded by hand in the results (benchmarks/search_rate.py), kept by a full run,
    which does not measure it."""
    try:
        with open(os.path.join(RESULTS, "placement.json")) as f:
            recorded = json.load(f).get("throughput")
    except FileNotFoundError:
        return {}
    return {"throughput": recorded} if recorded else {}


def printed_cell(graph, name, preset, cost_model, budget, seed):
    cell = run_cell(graph, preset, cost_model, budget, seed)
    print(
        f"{name:13s} {preset:17s} greedy {_ms(cell['baseline_ms'].get('greedy-ps')):>9s} ms  "
        f"annealed {cell['annealed_ms']:9.3f} ms  vs best {cell['gain_over_best_baseline']:6.1%}  "
        f"vs greedy {_share(cell['gain_over_greedy'], '.1%'):>7s}  bound gap {cell['gap_to_lower_bound']:6.1%}  "
        f"{cell['search_s']:5.1f} s  {cell['moves_per_s']:6.0f} moves/s  "
        f"acceptance {_share(cell['acceptance_start'])} -> {_share(cell['acceptance_end'])}",
        flush=True,
    )
    return cell


def printed_spread(cost_model, budget):
    spread = seed_spread(cost_model, budget)
    print(f"seeds 0-4 on {SPREAD[0]} {SPREAD[1]}: {spread['annealed_ms']} ms, spread {spread['spread']:.2%}")
    return spread


def printed_large(cost_model, budget, seed):
    t = time.perf_counter()
    large = run_cell(large_graph(), LARGE[1], cost_model, budget, seed)
    print(f"1024 GPUs: {large['search_s']} s ({time.perf_counter() - t:.1f} s with cluster set-up)")
    return large


def rerun_cells(cost_model, args, argv):
    """Rerun the cells ``args.cells`` names at the recorded budget and seed, replacing them in the results."""
    path = os.path.join(RESULTS, "placement.json")
    with open(path) as f:
        report = json.load(f)
    for name in args.cells:
        if name == "spread":
            report["spread"] = printed_spread(cost_model, report["budget_s"])
        elif name == "large":
            report["large"] = printed_large(cost_model, report["large"].get("budget_s", args.large_budget),
                                                report["seed"])
        else:
            model, _, preset = name.partition("/")
            if model not in MODELS or preset not in CLUSTERS:
                raise SystemExit(f"--cells: no cell {name!r} (MODEL/CLUSTER of {', '.join(MODELS)} "
                                 f"and {', '.join(CLUSTERS)}, spread, large)")
            cell = printed_cell(captured(model, MODELS[model]), model, preset, cost_model, report["budget_s"],
                                report["seed"])
            report["cells"] = [cell if (c["model"], c["cluster"]) == (cell["model"], preset) else c
                               for c in report["cells"]]
    report.setdefault("reruns", []).append({
        "command": "python " + " ".join(shlex.quote(a) for a in ["benchmarks/placement_bench.py", *argv]),
        "machine": machine(), "cost_model": cost_model.id, "cells": args.cells})
    report["summary"] = summary(report["cells"])
    write_results(report)
    return 0


def summary(cells):
    resnet = [c["search_s"] for c in cells if c["model"] == "resnet50" and c["cluster"] == "dgx-a100:4"]
    over_greedy = [c["gain_over_greedy"] for c in cells if c["gain_over_greedy"] is not None]
    return {
        "cells": len(cells),
        "cells_with_greedy": len(over_greedy),
        "mean_gain_over_greedy": round(sum(over_greedy) / len(over_greedy), 4),
        "mean_gain_over_best_baseline": round(sum(c["gain_over_best_baseline"] for c in cells) / len(cells), 4),
        "cells_worse_than_best_baseline": sum(c["gain_over_best_baseline"] < 0 for c in cells),
        "resnet50_dgx_h100_4_moves_per_s": next((c["moves_per_s"] for c in cells
                                                   if c["model"] == "resnet50" and c["cluster"] == "dgx-h100:4"), None),
        "max_search_s": max(c["search_s"] for c in cells),
        "resnet50_4x8_search_s": resnet[0] if resnet else None,
    }


def write_results(report):
    write_json_atomic(os.path.join(RESULTS, "placement.json"), report)
    write_text_atomic(os.path.join(RESULTS, "placement.md"), markdown(report))


if __name__ == "__main__":
    sys.exit(main())
