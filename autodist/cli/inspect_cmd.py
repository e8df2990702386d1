"""``autodist inspect``: summarise a captured step."""

import json


def register(subparsers):
    from autodist.cli.options import integer_between

    parser = subparsers.add_parser(
        "inspect",
        help="summarise a GraphItem: ops by phase, parameters, sparse variables, FLOPs",
        description="Summarise a captured step (graph.json; also a .pb/.pbtxt GraphDef or SavedModel).",
    )
    parser.add_argument("graph", help="graph.json written by `autodist capture`")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument("--top", type=integer_between(1, 10_000), default=10,
                        help="how many largest variables and op types to list")
    parser.set_defaults(func=run)


def run(args):
    from autodist.graph.loaders import load_graph
    from autodist.graph.summary import render, summarize

    summary = summarize(load_graph(args.graph), top=args.top)
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print("\n".join(render(summary)))
    return 0
