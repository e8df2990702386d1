"""``autodist bench SCRIPT (--preset P | --cluster F) [--strategies ...] [--steps N] [--format text|json] [-- ARGS]``.

Runs the searched plan and each baseline as a plan, for real, with the
launcher ``autodist run`` uses (on this machine, or on an emulated cluster),
and prints side by side each strategy's measured step time (the median of
the last ``--steps`` steps of the run's first training phase, the step the
plan is priced for, or of all but the first where the phase trains no more;
the steps before them are warm-up; a ``model.fit`` on a
dataset of fewer batches trains it repeated, so that a script of one batch
is measured too), its
spread, the predicted step time, their ratio, and both rankings.  A cluster
that cannot run here (its GPUs are elsewhere) gets each plan written, and
the commands that run it on the cluster's pods.  Strategies that run the
same program (:func:`runtime_program`) run once and share that run.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys

from autodist.errors import InputError, LaunchError
from autodist.strategy import ALLREDUCE_ALGORITHMS
from placement.baselines import BASELINE_NAMES

# the searched plan, every named baseline (placement.baselines.BASELINES), then data parallelism by each allreduce
# algorithm that no baseline is named after
ALGORITHM_STRATEGIES = tuple(a for a in ALLREDUCE_ALGORITHMS if a not in BASELINE_NAMES)
STRATEGIES = ("plan", *BASELINE_NAMES, *ALGORITHM_STRATEGIES)
DEFAULT_STRATEGIES = ("plan", *BASELINE_NAMES)
DEFAULT_STEPS = 10
MAX_STEPS = 100_000


def strategy_names(text):
    """An argparse type: a comma-separated list of STRATEGIES, in the order given."""
    import difflib

    names = [name.strip() for name in text.split(",") if name.strip()]
    for name in names:
        if name not in STRATEGIES:
            close = difflib.get_close_matches(name, STRATEGIES, n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise argparse.ArgumentTypeError(f"unknown strategy {name!r}{hint}; known: {','.join(STRATEGIES)}")
    if not names or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"expected distinct strategies from {','.join(STRATEGIES)}, got {text!r}")
    return names


def _add_options(p):
    from autodist.cli.costmodel_cmd import add_cost_model_argument
    from autodist.cli.options import add_search_arguments, integer_between
    from autodist.cli.cluster_args import add_cluster_arguments
    from launcher.runtime.joining import add_join_timeout

    add_cluster_arguments(p)
    p.add_argument("--strategies", type=strategy_names, default=list(DEFAULT_STRATEGIES), metavar="S,S,...",
                   help=f"what to run, in this order (default {','.join(DEFAULT_STRATEGIES)}; plan: the searched "
                        f"plan; also {','.join(ALGORITHM_STRATEGIES)}: data parallelism by that allreduce algorithm)")
    p.add_argument("--steps", type=integer_between(1, MAX_STEPS), default=DEFAULT_STEPS, metavar="N",
                   help=f"steps measured per strategy: the median of each run's last N (default {DEFAULT_STEPS}), "
                        "after at least the first (warm-up); a model.fit on a dataset of fewer batches trains it "
                        "repeated; of all but the first where the script trains N or fewer otherwise")
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    p.add_argument("-o", "--output", default="bench-plans", metavar="DIR",
                   help="folder the strategies' plans are written to (default bench-plans)")
    add_search_arguments(p)
    add_join_timeout(p)
    add_cost_model_argument(p)


def register(subparsers):
    from autodist.cli.script_args import add_script_command

    add_script_command(subparsers, "bench", "run the plan and every baseline for real: measured beside predicted",
                       _add_options, bench)


def _parse_rest(args):
    """Options given after the script, and the script's arguments after ``--``."""
    from autodist.cli.script_args import parse_after_script

    parse_after_script(args, _add_options, "autodist bench SCRIPT")


def _cluster(args):
    from autodist.cli.run_cmd import check_can_run
    from autodist.cli.cluster_args import cluster_from_args

    if not (args.cluster or args.preset or args.from_kubernetes):
        raise InputError("give the cluster to run on: --preset NAME[:N] or --cluster FILE", field="cluster")
    spec = cluster_from_args(args)
    check_can_run(spec)
    return spec


def strategy_plans(graph_item, resource_spec, names, cost_model, seed=0, budget_s=10.0, progress=None, moves=None):
    """``(name, Plan or None, why not)`` per strategy: the searched plan and each baseline's as a plan.

    A custom training loop runs only plans that allreduce every variable
    (as ``autodist run`` plans it), so its PS baselines are left out, with the reason.
    """
    from autodist.api import plan_with_search
    from autodist.plan import Plan, job_name_for
    from placement.baselines import Baseline

    searched, result = plan_with_search(graph_item, resource_spec, seed=seed, budget_s=budget_s, moves=moves,
                                        progress=progress, cost_model=cost_model)
    planned = result.simulator.problem.graph_item  # at the batch the plans train on (a pinned batch: per replica)
    candidates = {c.name: c for c in result.candidates}
    out = []
    for name in names:
        if name == "plan":
            out.append((name, searched, ""))
        elif name in candidates or name in ALGORITHM_STRATEGIES:
            if name in candidates:
                strategy, simulation = candidates[name].strategy, candidates[name].simulation
            else:  # every variable allreduced by that algorithm, as the ring baseline buckets them
                strategy = Baseline(name, algorithm=name).build(result.simulator.problem)
                simulation = result.simulator.simulate(strategy, trace=True)
            plan = Plan.from_strategy(planned, resource_spec, strategy, simulation, cost_model.id, seed,
                                      name=job_name_for(f"{graph_item.job.model_name or ''}-{name}"))
            out.append((name, plan, ""))
        else:
            out.append((name, None, f"{graph_item.job.why_collective_only()}: only plans that allreduce every variable"))
    return out


def measured_times(record, steps, name):
    """The last ``steps`` step times of a run record's first training phase (the step the plan was made and priced
    for; a later ``model.fit`` or step is planned where it starts, ``phase_first_steps``), after at least its first
    (warm-up): all but the first where the phase trained ``steps`` or fewer; a LaunchError when it trained fewer than
    two (nothing after warm-up)."""
    times = record.get("step_times") or []
    later = (record.get("phase_first_steps") or [1])[1:]
    if later:
        times = times[:later[0] - 1]
    if len(times) < 2:
        raise LaunchError(f"strategy {name}: the script trained {len(times)} step{'s' if len(times) != 1 else ''}"
                          f"{' in its first phase' if later else ''}, "
                          "and the first is warm-up: give the script at least 2", field="--steps")
    return times[-min(steps, len(times) - 1):]


def _one_line(exc, name):
    """A failed run's error as one line: its first line and its last (the task's last log line)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    last = f" {lines[-1]}" if len(lines) > 1 else ""
    return f"strategy {name}: {lines[0]}{last}"


def runtime_program(strategy, resource_spec):
    """A key that strategies whose runs execute the same program share: the strategy, its algorithm names
    replaced by the ring where the algorithm runs as the ring on its replicas (one node, or one replica per node:
    autodist.collective_stages.distinct_algorithms).  Such strategies run once and share the measurement: two
    runs of one program differ only by this machine's noise (ring and hierarchical on emu-10gbit:2, one program,
    measured 21.1 and 16.2 ms)."""
    import json

    from autodist.collective_stages import distinct_algorithms

    offered, _ = distinct_algorithms([resource_spec.device(r[0]).node for r in strategy.replicas])
    data = strategy.to_dict()
    for sync in data["sync"].values():
        if sync.get("algorithm") not in offered:
            sync["algorithm"] = "ring"
    return json.dumps(data, sort_keys=True)


def run_strategy(name, plan, plan_path, script, script_args, folder, join_timeout, steps=None):
    """Run ``plan`` with the local launcher, its output logged in ``folder``; the run's record.

    With ``steps``, a ``model.fit`` on a dataset of fewer batches than ``steps`` and a warm-up trains it
    repeated (:func:`launcher.runtime.fit.fewer_steps_repeated`)."""
    from autodist.io import read_json
    from launcher.local import run_local
    from launcher.runtime.fit import MIN_STEPS_ENV

    report = os.path.join(folder, f"{name}.report.json")
    print(f"autodist: bench: running {name}", file=sys.stderr, flush=True)
    try:
        run_local(plan, plan_path, script, script_args, report_path=report, join_timeout=join_timeout, quiet=True,
                  chief_in_place=False, env={MIN_STEPS_ENV: str(steps + 1)} if steps else None)
    except LaunchError as exc:
        raise LaunchError(_one_line(exc, name)) from None
    return read_json(report)


def strategy_row(name, plan, plan_path, why_not, times, same_run_as=None, link_bytes=None):
    """One strategy's row: its measured median and quartiles (of ``times``), predicted step time and their ratio;
    ``same_run_as``: the strategy whose run (the same program, :func:`runtime_program`) gave ``times``;
    ``link_bytes``: per emulated node, the bytes its link sent during that run."""
    import numpy as np

    predicted = float(plan.prediction["step_time"]) if plan is not None else None
    row = {"name": name, "plan": plan_path, "measured_step_time": None, "measured_p25": None, "measured_p75": None,
           "predicted_step_time": predicted, "measured_over_predicted": None}
    if why_not:
        row["skipped"] = why_not
    if same_run_as:
        row["same_run_as"] = same_run_as
    if link_bytes:
        row["link_bytes_sent"] = dict(link_bytes)
    if times:
        p25, median, p75 = (float(v) for v in np.percentile(times, [25, 50, 75]))
        row.update(measured_steps=len(times), measured_step_time=median, measured_p25=p25, measured_p75=p75,
                   measured_over_predicted=median / predicted if predicted else None)
    return row


def add_ranks(rows):
    """Each row's ``measured_rank`` and ``predicted_rank``: 1 for the fastest, None where the time is unknown."""
    for key, rank in (("measured_step_time", "measured_rank"), ("predicted_step_time", "predicted_rank")):
        known = sorted((r[key], r["name"]) for r in rows if r[key] is not None)
        order = {name: k + 1 for k, (_, name) in enumerate(known)}
        for row in rows:
            row[rank] = order.get(row["name"])
    return rows


def _pod_commands(rows, args):
    """Per strategy with a plan: the commands that run it on the cluster's pods."""
    script_args = shlex.join(args.script_args)
    out = []
    for row in rows:
        if row["plan"]:
            folder = os.path.join(args.output, f"k8s-{row['name']}")
            out.append(f"autodist emit {shlex.quote(row['plan'])} -o {shlex.quote(folder)} --image IMAGE "
                       f"--script {shlex.quote(os.path.basename(args.script))} --script-args {shlex.quote(script_args)}"
                       f" && kubectl apply -f {shlex.quote(folder)}")
    return out


def _ms(seconds):
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def render_text(document):
    """The side-by-side table, and the commands for pods when nothing ran here."""
    lines = [f"autodist bench: {document['script']} on {document['cluster']}, median of the last "
             f"{document['steps']} steps per strategy", "",
             f"{'strategy':<15} {'measured ms':>11} {'p25-p75 ms':>15} {'predicted ms':>12} {'ratio':>6} "
             f"{'rank measured':>13} {'rank predicted':>14}"]
    for r in document["strategies"]:
        spread = "-" if r["measured_p25"] is None else f"{_ms(r['measured_p25'])}-{_ms(r['measured_p75'])}"
        ratio = "-" if r["measured_over_predicted"] is None else f"{r['measured_over_predicted']:.2f}"
        lines.append(f"{r['name']:<15} {_ms(r['measured_step_time']):>11} {spread:>15} "
                     f"{_ms(r['predicted_step_time']):>12} {ratio:>6} {r['measured_rank'] or '-':>13} "
                     f"{r['predicted_rank'] or '-':>14}" + (f"  (skipped: {r['skipped']})" if "skipped" in r else "")
                     + (f"  (the run of {r['same_run_as']}: the same program)" if "same_run_as" in r else "")
                     + (f"  (median of {r['measured_steps']} steps: all the script trained but the first)"
                        if (r.get("measured_steps") or document["steps"]) < document["steps"] else "")
                     + (f"  links sent {sum(r['link_bytes_sent'].values()) / 2**20:.1f} MiB"
                        if r.get("link_bytes_sent") else ""))
    if document.get("pod_commands"):
        lines += ["", "this cluster's devices are not on this machine: run each plan on its pods, and compare the "
                      "step time its chief prints:"] + [f"  {c}" for c in document["pod_commands"]]
    return "\n".join(lines)


def _runs_here(plans):
    """Whether this machine has the devices of the plans' cluster (their first plan tells)."""
    from launcher.local import check_runs_here

    first = next((plan for _, plan, _ in plans if plan is not None), None)
    try:
        if first is not None:
            check_runs_here(first)
    except LaunchError:
        return False
    return True


def bench(args):
    import json
    import tempfile

    from autodist.api import graph_of
    from autodist.cli.options import check_search_size, search_budget
    from autodist.cli.progress import SearchProgress
    from cost_models.model import load_cost_model
    from launcher.local import Terminated

    _parse_rest(args)
    if not os.path.isfile(args.script):
        raise InputError("no such training script", source=args.script)
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise InputError("exists and is not a folder", field="-o")
    spec = _cluster(args)
    check_search_size(spec, **search_budget(args))
    plans = strategy_plans(graph_of(args.script, args.script_args), spec, args.strategies,
                           load_cost_model(args.cost_model), args.seed, progress=SearchProgress(), **search_budget(args))
    os.makedirs(args.output, exist_ok=True)
    paths = {}
    for name, plan, _ in plans:
        if plan is not None:
            paths[name] = os.path.join(args.output, f"{name}.json")
            plan.save(paths[name])
    here = _runs_here(plans)
    times, ran, link_bytes = {}, {}, {}  # ran: runtime program -> the strategy that ran it
    if here:
        with tempfile.TemporaryDirectory(prefix="autodist-bench-") as folder:
            try:
                for name, plan, _ in plans:
                    if plan is not None and runtime_program(plan.strategy, spec) not in ran:
                        record = run_strategy(name, plan, paths[name], args.script, args.script_args, folder,
                                              args.join_timeout, args.steps)
                        times[name] = measured_times(record, args.steps, name)
                        link_bytes[name] = record.get("link_bytes_sent")
                        ran[runtime_program(plan.strategy, spec)] = name
            except Terminated:
                print("autodist: terminated; every task is stopped", file=sys.stderr)
                return 128 + signal.SIGTERM
    rows = []
    for name, plan, why_not in plans:
        first = ran.get(runtime_program(plan.strategy, spec)) if plan is not None else None
        rows.append(strategy_row(name, plan, paths.get(name), why_not, times.get(first),
                                 first if first not in (None, name) else None, link_bytes.get(first)))
    rows = add_ranks(rows)
    document = {"script": args.script, "script_args": args.script_args, "cluster": spec.name, "steps": args.steps,
                "strategies": rows}
    if not here:
        document["pod_commands"] = _pod_commands(rows, args)
    print(json.dumps(document, indent=2) if args.format == "json" else render_text(document))
    return 0
