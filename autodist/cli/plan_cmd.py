"""``autodist plan SOURCE --cluster FILE | --preset NAME[:N] [-- SCRIPT_ARGS]``: search and write a plan.

The script's arguments after ``--`` are used to capture its step and, unless
``--script-args`` says otherwise, are the arguments the emitted pods run it with.
"""

from __future__ import annotations

import shlex
import sys

from autodist.errors import InputError


def register(subparsers):
    from autodist.cli.costmodel_cmd import add_cost_model_argument
    from autodist.cli.emit_cmd import add_manifest_arguments
    from autodist.cli.job_options import add_job_arguments
    from autodist.cli.options import add_search_arguments
    from autodist.cli.script_args import pass_script_args
    from autodist.cli.cluster_args import add_cluster_arguments

    p = subparsers.add_parser("plan", help="search the best placement and write plan.json",
                              usage="autodist plan SOURCE [options] [-- SCRIPT_ARGS ...]")
    p.add_argument("source", help="training script (.py), graph.json, GraphDef (.pb/.pbtxt) or SavedModel directory")
    add_cluster_arguments(p)
    p.add_argument("-o", "--output", default="plan.json", metavar="FILE", help="where to write the plan (default plan.json)")
    add_search_arguments(p)
    p.add_argument("--allreduce-only", action="store_true",
                   help="search only plans that allreduce every variable (custom training loops get only those anyway)")
    p.add_argument("--emit-k8s", metavar="DIR", help="also write Kubernetes manifests for the plan here")
    add_job_arguments(p)
    add_manifest_arguments(p)
    add_cost_model_argument(p)
    pass_script_args(p, dest="script_argv")
    p.set_defaults(func=run)


def warn_if_unsearched(plan):
    """Say on stderr when the search's budget ran out before its first move (the plan is the best baseline)."""
    warning = (plan.provenance.get("search") or {}).get("warning")
    if warning:
        print(f"autodist: warning: {warning}", file=sys.stderr, flush=True)


def summary(plan):
    pred = plan.prediction
    jobs = ", ".join(f"{len(plan.tasks_of(j))} {j}" for j in ("chief", "worker", "ps") if plan.tasks_of(j))
    return (
        f"predicted step {pred['step_time'] * 1e3:.3f} ms (compute {pred['compute_time'] * 1e3:.3f} ms, "
        f"then {pred['exposed_comm_time'] * 1e3:.3f} ms of synchronisation and updates); tasks: {jobs}"
    )


def batch_line(plan):
    """The plan's batch semantics in one sentence (``autodist.graph.semantics.describe``)."""
    from autodist.graph.semantics import describe

    graph = plan.graph
    return describe(graph["batch_size"], graph.get("script_batch", 0), graph.get("batch_per_replica", False),
                    graph.get("batch_pinned", ""), len(plan.resource_spec.compute_devices()), plan.micro_batches)


def run(args):
    from autodist.api import graph_of
    from autodist.api import make_plan
    from autodist.cli.progress import SearchProgress
    from autodist.cli.emit_cmd import manifests_for, options_from_args, script_args_of
    from autodist.cli.job_options import batch_options, job_options, search_allowances
    from autodist.cli.options import check_search_size, search_budget
    from autodist.io import check_output_file
    from autodist.cli.cluster_args import cluster_from_args
    from cost_models.model import load_cost_model

    check_output_file(args.output, field="-o")
    if args.script_argv:
        if args.script_args:
            raise InputError("give the script's arguments once: after -- or with --script-args", field="--script-args")
        args.script_args = shlex.join(args.script_argv)
    script = args.source if args.source.endswith(".py") else None
    if args.emit_k8s:
        from launcher.manifests import check_output_folder

        options_from_args(args, script)  # bad manifest options and folders fail before the search
        check_output_folder(args.emit_k8s, args.force)
    resource_spec = cluster_from_args(args)
    check_search_size(resource_spec, **search_budget(args))
    graph_item = graph_of(args.source, script_args_of(args))
    plan = make_plan(graph_item, resource_spec, seed=args.seed, progress=SearchProgress(), **search_budget(args),
                     allreduce_only=args.allreduce_only, cost_model=load_cost_model(args.cost_model),
                     **job_options(args), **search_allowances(args), **batch_options(args))
    objects = manifests_for(plan, args, script) if args.emit_k8s else []
    plan.save(args.output)
    warn_if_unsearched(plan)
    print(f"{args.output}: {summary(plan)}")
    print(f"batch: {batch_line(plan)}")
    if objects:
        from launcher.manifests import write_manifests

        for path in write_manifests(objects, args.emit_k8s, force=args.force):
            print(path)
    return 0
