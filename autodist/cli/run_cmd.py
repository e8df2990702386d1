"""``autodist run train.py [--cluster FILE | --preset NAME[:N]] [--plan plan.json] [-- script args]``.

Without ``--plan``: capture the script's step, search a plan, save it and print
the short report; then train with it on this machine, one process per task.
With ``--plan`` and a cluster, the plan must have been made for that cluster;
the tasks refuse a script whose global batch is not the plan's, unless
``--replan`` searches a new plan for it first.
"""

from __future__ import annotations

import signal

from autodist.errors import InputError

DEFAULT_PRESET = "cpu-local:2"


def _add_options(p):
    from autodist.cli.costmodel_cmd import add_cost_model_argument
    from autodist.cli.job_options import add_job_arguments
    from autodist.cli.options import add_search_arguments
    from autodist.cli.cluster_args import add_cluster_arguments
    from launcher.runtime.joining import add_join_timeout

    add_cluster_arguments(p)
    add_job_arguments(p)
    p.add_argument("--plan", metavar="FILE", help="run this plan instead of searching one")
    p.add_argument("-o", "--output", default="plan.json", metavar="FILE",
                   help="where a searched plan is written (default plan.json)")
    add_search_arguments(p)
    p.add_argument("--report", metavar="FILE", help="write a JSON record of the run (devices, transfers, step times)")
    p.add_argument("--replan", action="store_true",
                   help="with --plan: when the script's batch is not the plan's, search a new plan for the plan's "
                        "cluster (written to -o) instead of refusing")
    add_join_timeout(p)
    add_cost_model_argument(p)


def register(subparsers):
    from autodist.cli.script_args import add_script_command

    add_script_command(subparsers, "run", "plan (unless --plan) and train a script with the plan on this machine",
                       _add_options, run)


def _parse_rest(args):
    """Options given after the script, and the script's arguments after ``--``."""
    from autodist.cli.script_args import parse_after_script

    parse_after_script(args, _add_options, "autodist run SCRIPT")


def check_can_run(resource_spec):
    """Refuse an emulated cluster this process cannot build (no root), before any capture or search."""
    if resource_spec.emulated:
        from launcher.emulation import check_can_emulate

        check_can_emulate(resource_spec)


def _searched_plan(args, resource_spec=None, graph_item=None):
    """Capture the script (unless ``graph_item``), search a plan for the cluster, save it to ``-o``."""
    from autodist.api import graph_of
    from autodist.api import make_plan
    from autodist.cli.cluster_args import cluster_from_args
    from autodist.cli.job_options import batch_options, job_options, search_allowances
    from autodist.cli.plan_cmd import batch_line, summary, warn_if_unsearched
    from autodist.cli.options import check_search_size, search_budget
    from autodist.cli.progress import SearchProgress
    from autodist.resource_spec import load_cluster
    from cost_models.model import load_cost_model

    given = args.cluster or args.preset or args.from_kubernetes
    if resource_spec is None:
        resource_spec = cluster_from_args(args) if given else load_cluster(preset=DEFAULT_PRESET)
    check_search_size(resource_spec, **search_budget(args))
    check_can_run(resource_spec)
    graph_item = graph_item or graph_of(args.script, args.script_args)
    check_batch_can_change(graph_item, args.global_batch)
    collective_only = graph_item.job.why_collective_only()
    if collective_only:
        print(f"autodist: {collective_only}: searching plans that allreduce every variable", flush=True)
    plan = make_plan(graph_item, resource_spec, seed=args.seed, progress=SearchProgress(), **search_budget(args),
                     cost_model=load_cost_model(args.cost_model),
                     **job_options(args), **search_allowances(args), **batch_options(args))
    plan.save(args.output)
    warn_if_unsearched(plan)
    print(f"{args.output}: {summary(plan)}", flush=True)
    print(f"autodist: batch: {batch_line(plan)}", flush=True)
    print(f"autodist: {replicas_sentence(plan)}", flush=True)
    return plan, args.output


def check_batch_can_change(graph_item, global_batch):
    """Refuse ``--global-batch`` for a custom loop: its step gets the batches the script makes (model.fit's are
    re-cut to the plan's batch; a step that pins its batch is refused by the planning, which says why)."""
    if global_batch and not graph_item.job.batch_pinned and global_batch != graph_item.job.batch_size and graph_item.job.step == "function":
        raise InputError(f"the script's custom loop gives its step batches of {graph_item.job.batch_size}, which "
                         "autodist run cannot change (it re-cuts model.fit's); price another global batch with "
                         "autodist plan or placement report, or run every replica on the script's batch with "
                         "--batch-per-replica", field="--global-batch")


def replicas_sentence(plan):
    """How many replicas ``plan`` uses on how many of the cluster's nodes, and why."""
    step = plan.prediction.get("step_time") or 0.0
    everywhere = (plan.prediction.get("baselines") or {}).get("ring")
    replicas = len(plan.strategy.replicas)
    nodes = {d.split("/")[0] for r in plan.strategy.replicas for d in r}
    total = len(plan.resource_spec.nodes)
    uses = (f"the plan uses {replicas} replica{'s' if replicas != 1 else ''} on {len(nodes)} of the cluster's "
            f"{total} node{'s' if total != 1 else ''}")
    if plan.graph.get("batch_per_replica"):
        return f"{uses}: one per compute device, as every replica runs the script's batch"
    if everywhere is not None and everywhere > step and total > len(nodes):
        return (f"{uses}: data parallelism on every node (ring allreduce) is predicted at {everywhere * 1e3:.3f} ms "
                f"per step, slower than this plan's {step * 1e3:.3f} ms (exchanging the gradients costs more than "
                "the compute it would split)")
    return f"{uses}: predicted fastest, at {step * 1e3:.3f} ms per step"


def _replanned(args, plan):
    """``plan``, or a plan searched for its cluster when the script's captured batch is not the plan's."""
    from autodist.api import graph_of

    graph_item = graph_of(args.script, args.script_args)
    batch = plan.graph.get("script_batch") or plan.graph.get("batch_size")
    if graph_item.job.batch_size == batch:
        return plan, args.plan
    print(f"autodist: the script's batch is {graph_item.job.batch_size} and {args.plan} was made for {batch}: "
          "planning again", flush=True)
    return _searched_plan(args, plan.resource_spec, graph_item)


def run(args):
    import os
    import sys
    import tempfile

    from autodist.cli.job_options import check_no_batch_options
    from autodist.io import check_output_file
    from autodist.plan import Plan
    from launcher.local import Terminated, run_local
    from launcher.runtime.phases import PHASES_ENV

    _parse_rest(args)
    for path, option in ((args.report, "--report"), (None if args.plan else args.output, "-o")):
        if path:
            check_output_file(path, field=option)
    if not os.path.isfile(args.script):
        raise InputError("no such training script", source=args.script)
    if args.replan and not args.plan:
        raise InputError("re-plans a given plan: use it with --plan", field="--replan")
    if args.plan:
        plan, plan_path = Plan.load(args.plan), args.plan
        check_no_batch_options(args, args.plan)
        check_can_run(plan.resource_spec)
        if args.cluster or args.preset or args.from_kubernetes:
            from autodist.cli.report_cmd import check_plan_cluster
            from autodist.cli.cluster_args import cluster_from_args

            check_plan_cluster(plan, cluster_from_args(args), args.plan)
        if args.micro_batches and args.micro_batches != plan.micro_batches:
            raise InputError(f"{args.plan} was made for {plan.micro_batches} micro-batches per step; plan again with "
                             f"--micro-batches {args.micro_batches}", field="--micro-batches")
        priced = "on" if plan.graph.get("xla") else "off"
        if getattr(args, "xla", None) in ("on", "off") and args.xla != priced:
            why = plan.graph.get("xla_reason") or "its replicas compile the step so"
            raise InputError(f"{args.plan} was priced with XLA {priced} ({why}); plan again with --xla {args.xla}",
                             field="--xla")
        if args.replan:
            plan, plan_path = _replanned(args, plan)
    else:
        plan, plan_path = _searched_plan(args)
    with tempfile.TemporaryDirectory(prefix="autodist-phases-") as phases_dir:
        try:
            run_local(plan, plan_path, args.script, args.script_args, report_path=args.report,
                      join_timeout=args.join_timeout, env={PHASES_ENV: os.path.abspath(phases_dir)})
        except Terminated:
            print("autodist: terminated; every task is stopped", file=sys.stderr)
            return 128 + signal.SIGTERM
        show_phases(phases_dir, plan_path, args.cost_model)
    return 0


def show_phases(folder, plan_path, cost_model=None):
    """The closing line of every training phase of a run that kept its phases in ``folder``
    (launcher.runtime.phases): measured against predicted step time, a later phase's plan priced by the simulator
    and saved beside ``plan_path`` as ``NAME.phase-K.json``.  Nothing where the run kept none (a one-client run
    printed its own lines)."""
    import os

    from autodist.api import priced_plan
    from autodist.graph.item import GraphItem
    from autodist.io import read_json
    from autodist.plan import Plan
    from cost_models.model import load_cost_model
    from launcher.runtime.fit import measured_line
    from launcher.runtime.phases import PHASES_RECORD

    record = os.path.join(folder, PHASES_RECORD)
    if not os.path.isfile(record):
        return
    phases = read_json(record)["phases"]
    model = load_cost_model(cost_model) if any(p.get("graph") for p in phases) else None
    for phase in phases:
        if phase.get("graph"):
            priced = priced_plan(GraphItem.load(phase["graph"]), Plan.load(phase["plan"]), model)
            stem, ext = os.path.splitext(os.path.abspath(plan_path))
            kept = f"{stem}.phase-{phase['phase']}{ext or '.json'}"
            priced.save(kept)
            phase = dict(phase, plan=kept, predicted_step_time=priced.prediction["step_time"])
        print(measured_line(phase, len(phases) > 1), flush=True)
