"""``autodist costmodel eval [--json]``: how good the shipped cost models are."""

import json


def register(subparsers):
    parser = subparsers.add_parser("costmodel", help="evaluate the cost models")
    sub = parser.add_subparsers(dest="what", metavar="WHAT")
    sub.required = True
    ev = sub.add_parser("eval", help="held-out op error, leave-one-model-out step error, allreduce bus bandwidth")
    ev.add_argument("--json", action="store_true", help="print the report as JSON")
    ev.add_argument("--data", default=None, metavar="DIR",
                    help="folder with op_timings.csv.gz and op_timings.json (default: the shipped data)")
    ev.set_defaults(func=run_eval)


def run_eval(args):
    from cost_models.evaluation import evaluate, format_report

    report = evaluate(args.data)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        print(format_report(report))
    return 0
