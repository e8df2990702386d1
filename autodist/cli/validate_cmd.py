"""``autodist validate FILE``: check a graph, plan or cluster file as autodist checks it on load.

Prints ``ok`` and a one-line summary, or the first problem (one line, exit
status 2): a way to check a plan from another tool before emitting it.
"""

from autodist.errors import InputError

CLUSTER_SUFFIXES = (".yaml", ".yml")


def register(subparsers):
    p = subparsers.add_parser(
        "validate",
        help="check a graph.json, plan.json or cluster file; print ok and a summary, or the first problem",
        description="Check a GraphItem (graph.json, .pb, .pbtxt, SavedModel), a plan (plan.json) or a "
        "cluster (cluster.yaml or a resource spec JSON) against every invariant autodist assumes.",
    )
    p.add_argument("file", help="graph.json, plan.json, cluster.yaml, or a GraphDef / SavedModel")
    p.set_defaults(func=run)


def _json_format(path):
    from autodist.io import read_json

    data = read_json(path)
    return data.get("format") if isinstance(data, dict) else None


def describe(path):
    """``(kind, one-line summary)`` of a valid file; raises AutoDistError at its first problem."""
    from autodist.graph.item import FORMAT as GRAPH_FORMAT
    from autodist.plan import FORMAT as PLAN_FORMAT
    from autodist.resource_spec.spec import FORMAT as CLUSTER_FORMAT

    fmt = _json_format(path) if path.endswith(".json") else None
    if path.endswith(".json") and fmt not in (GRAPH_FORMAT, PLAN_FORMAT, CLUSTER_FORMAT):
        known = ", ".join((GRAPH_FORMAT, PLAN_FORMAT, CLUSTER_FORMAT))
        raise InputError(f"not an autodist document (format {fmt!r}; expected one of {known})", source=path)
    if fmt == PLAN_FORMAT:
        from autodist.cli.plan_cmd import summary
        from autodist.plan import Plan

        plan = Plan.load(path)
        return "plan", f"{plan.name!r}: {len(plan.variables)} variables; {summary(plan)}"
    if fmt == CLUSTER_FORMAT or path.endswith(CLUSTER_SUFFIXES):
        from autodist.resource_spec.cluster_file import read_cluster_file

        spec = read_cluster_file(path)
        return "cluster", f"{spec.name!r}: {len(spec.nodes)} nodes, {len(spec.devices())} devices ({len(spec.gpus())} GPUs)"
    from autodist.graph.loaders import load_graph

    return "graph", load_graph(path).describe()


def run(args):
    kind, summary = describe(args.file)
    print(f"ok: {args.file}: {kind} {summary}")
    return 0
