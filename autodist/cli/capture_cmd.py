"""``autodist capture``: capture a training step into graph.json."""

import os

from autodist.cli.script_args import pass_script_args
from autodist.errors import InputError

SCRIPT_SUFFIX = ".py"


def register(subparsers):
    from autodist.cli.options import seconds_between
    from autodist.graph.script import DEFAULT_TIMEOUT_S

    parser = subparsers.add_parser(
        "capture",
        help="capture one training step into a GraphItem JSON",
        usage="autodist capture SOURCE -o GRAPH_JSON [--timeout SECONDS] [-- SCRIPT_ARGS ...]",
        description="Capture one training step of a Keras model.fit script, a script whose step is an "
        "@autodist.function, a GraphDef (.pb/.pbtxt) or a SavedModel directory. Arguments after -- "
        "go to the script.",
    )
    parser.add_argument("source", help="train.py, graph.pb, graph.pbtxt or a SavedModel directory")
    parser.add_argument("-o", "--output", required=True, help="GraphItem JSON to write")
    parser.add_argument("--timeout", type=seconds_between(1, 86_400), default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"stop a script that has not reached its training step after this long "
                        f"(default {DEFAULT_TIMEOUT_S:g})")
    pass_script_args(parser)
    parser.set_defaults(func=run)


def run(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from autodist.graph.capture import capture_script, load_graph
    from autodist.io import check_output_file

    check_output_file(args.output, field="-o")
    if args.source.endswith(SCRIPT_SUFFIX):
        item = capture_script(args.source, args.script_args, timeout_s=args.timeout)
    else:
        if args.script_args:
            raise InputError("script arguments given, but the source is not a .py script", source=args.source)
        item = load_graph(args.source)
    item.save(args.output)
    step = f" (the step at {item.job.source})" if args.source.endswith(SCRIPT_SUFFIX) else ""
    print(f"captured {item.describe()}{step} -> {args.output}")
    for op in item.unknown_trips():
        print(f"warning: the trip count of loop {op} is not known from the graph; its body is priced once per step")
    return 0
