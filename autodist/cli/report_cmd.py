"""``placement report``: show what autodist would do with a job, how fast, and why."""

import json

from autodist.errors import InputError

FORMATS = ("text", "markdown", "json")


def register(subparsers):
    from autodist.cli.costmodel_cmd import add_cost_model_argument
    from autodist.cli.job_options import add_job_arguments
    from autodist.cli.options import add_search_arguments
    from autodist.cli.script_args import pass_script_args
    from autodist.cli.cluster_args import add_cluster_arguments

    p = subparsers.add_parser(
        "report",
        usage="placement report SOURCE [options] [-- SCRIPT_ARGS ...]",
        help="what autodist would do with a job on a cluster, how fast, and why",
        description="Plan a job (or read a plan) and report the predicted step time against every "
        "baseline, the bottleneck, the pods, the largest variables and why each large decision was taken "
        "(re-simulated with that decision changed). Arguments after -- go to the script.",
    )
    p.add_argument("source", help="train.py, graph.json (or .pb/.pbtxt/SavedModel), or plan.json")
    add_cluster_arguments(p)
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--timeline", metavar="TRACE_JSON", help="write the simulated step as a Chrome trace")
    add_search_arguments(p)
    p.add_argument("--compare", metavar="PLAN_JSON", help="another plan to compare with")
    p.add_argument("--references", action="store_true",
                   help="also price the job as other systems run it on this cluster: Horovod, TensorFlow 1's "
                   "distributed parameter servers, AutoDist's PartitionedPS (not runnable by autodist; "
                   "TensorFlow's PS takes seconds to simulate on a cluster of hundreds of GPUs)")
    add_job_arguments(p)
    add_cost_model_argument(p)
    pass_script_args(p)
    p.set_defaults(func=run)


def _is_plan_file(path):
    if not path.endswith(".json"):
        return False
    from autodist.io import read_json
    from autodist.plan import FORMAT

    data = read_json(path)
    return isinstance(data, dict) and data.get("format") == FORMAT


def _cluster_given(args):
    return bool(args.cluster or args.preset or args.from_kubernetes)


def _from_plan_file(args):
    from autodist.plan import Plan
    from autodist.cli.cluster_args import cluster_from_args
    from autodist.cli.job_options import check_no_batch_options

    plan = Plan.load(args.source)
    check_no_batch_options(args, args.source)
    for needs_graph in ("timeline", "references"):
        if getattr(args, needs_graph):
            raise InputError(f"--{needs_graph} needs the job's graph: give train.py or graph.json, not a plan",
                             field=f"--{needs_graph}")
    if _cluster_given(args):
        check_plan_cluster(plan, cluster_from_args(args), args.source)
    return plan, None, None, None


def check_plan_cluster(plan, spec, where):
    """Raise InputError unless ``plan`` was made for the cluster ``spec``."""
    if spec.content_hash() != plan.resource_spec.content_hash():
        raise InputError(
            f"the plan was made for cluster {plan.resource_spec.name!r}, not {spec.name!r}; "
            "plan again for this cluster, or leave out the cluster option",
            source=where,
        )


def _from_job(args):
    from cost_models.model import load_cost_model

    from autodist.api import graph_of, plan_with_search, with_job_options
    from autodist.cli.job_options import batch_options, job_options, search_allowances
    from autodist.cli.options import check_search_size, search_budget
    from autodist.cli.progress import SearchProgress
    from autodist.cli.cluster_args import cluster_from_args

    if not _cluster_given(args):
        raise InputError("give the cluster: --cluster FILE, --preset NAME[:N] or --from-kubernetes")
    spec = cluster_from_args(args)
    check_search_size(spec, prog="placement", **search_budget(args))
    graph_item = with_job_options(graph_of(args.source, args.script_args), **job_options(args))
    cost_model = load_cost_model(args.cost_model)
    plan, result = plan_with_search(graph_item, spec, seed=args.seed, progress=SearchProgress(), cost_model=cost_model,
                                    **search_budget(args), **search_allowances(args), **batch_options(args))
    return plan, result.simulator.problem.graph_item, result, cost_model  # the item as planned (its batch)


def run(args):
    from autodist.io import check_output_file, write_json_atomic
    from autodist.report.timeline import chrome_trace
    from autodist.plan import Plan
    from autodist.report import build_report, render

    if args.timeline:
        check_output_file(args.timeline, field="--timeline")
    if _is_plan_file(args.source):
        plan, graph_item, result, cost_model = _from_plan_file(args)
        plan_file = args.source
    else:
        plan, graph_item, result, cost_model = _from_job(args)
        plan_file = None
    other = Plan.load(args.compare) if args.compare else None
    budget_s = args.budget if result and args.moves is None else None
    doc = build_report(plan, graph_item, result, other, plan_file=plan_file, budget_s=budget_s, cost_model=cost_model,
                       references=args.references)
    if args.timeline:
        write_json_atomic(args.timeline, chrome_trace(result.simulation))
    if args.format == "json":
        print(json.dumps(doc, indent=1))
    else:
        print(render(doc, args.format), end="")
    return 0
