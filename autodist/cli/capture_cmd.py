"""``autodist capture``: capture a training step into graph.json."""

import os

from autodist.cli.script_args import pass_script_args
from autodist.errors import InputError

SCRIPT_SUFFIX = ".py"


def register(subparsers):
    parser = subparsers.add_parser(
        "capture",
        help="capture one training step into a GraphItem JSON",
        usage="autodist capture SOURCE -o GRAPH_JSON [-- SCRIPT_ARGS ...]",
        description="Capture one training step of a Keras model.fit script, a script whose step is an "
        "@autodist.function, a GraphDef (.pb/.pbtxt) or a SavedModel directory. Arguments after -- "
        "go to the script.",
    )
    parser.add_argument("source", help="train.py, graph.pb, graph.pbtxt or a SavedModel directory")
    parser.add_argument("-o", "--output", required=True, help="GraphItem JSON to write")
    pass_script_args(parser)
    parser.set_defaults(func=run)


def run(args):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from autodist.graph.capture import capture_script, load_graph

    if args.source.endswith(SCRIPT_SUFFIX):
        item = capture_script(args.source, args.script_args)
    else:
        if args.script_args:
            raise InputError("script arguments given, but the source is not a .py script", source=args.source)
        item = load_graph(args.source)
    item.save(args.output)
    print(
        f"captured {item.job.model_name or args.source}: {len(item.ops):,} ops, "
        f"{len(item.trainable_variables())} trainable variables "
        f"({item.parameter_count():,} parameters), batch size {item.job.batch_size} -> {args.output}"
    )
    return 0
