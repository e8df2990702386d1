"""``autodist costmodel eval [--json]``: how good the shipped cost models are; ``costmodel install DIR``."""

import json
import os

from autodist.errors import InputError


def register(subparsers):
    parser = subparsers.add_parser("costmodel", help="evaluate the cost models, install a measured one")
    sub = parser.add_subparsers(dest="what", metavar="WHAT")
    sub.required = True
    ev = sub.add_parser("eval", help="held-out op error, leave-one-model-out step error, allreduce bus bandwidth")
    ev.add_argument("--json", action="store_true", help="print the report as JSON")
    ev.add_argument("--data", default=None, metavar="DIR",
                    help="folder with op_timings.csv.gz and op_timings.json (default: the shipped data)")
    ev.set_defaults(func=run_eval)
    ins = sub.add_parser("install", help="replace the package's shipped cost model with one `autodist profile` "
                                         "measured into DIR")
    ins.add_argument("folder", metavar="DIR")
    ins.set_defaults(func=run_install)


def add_cost_model_argument(parser):
    """``--cost-model DIR``: the cost model `autodist profile` measured there, instead of the shipped one."""
    parser.add_argument("--cost-model", metavar="DIR", default=None,
                        help="use the cost model `autodist profile` wrote into DIR (default: $AUTODIST_COST_MODEL, "
                             "else the shipped model)")


def run_eval(args):
    from cost_models.evaluation import evaluate, format_report

    report = evaluate(args.data)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        print(format_report(report))
    return 0


def run_install(args):
    """Copy the folder's op data and model, and its calibrations, over the shipped files (each atomically)."""
    from autodist.io import write_bytes_atomic
    from cost_models import model

    model.load_cost_model(args.folder)  # a folder that does not load is refused before anything is copied
    op_files = [model.TIMINGS, model.TIMINGS_META, model.MODEL_PICKLE, model.MODEL_META, model.ONE_THREAD_PICKLE,
                model.ONE_THREAD_META]
    has_ops = os.path.exists(os.path.join(args.folder, os.path.basename(model.TIMINGS)))
    installed = []
    for shipped in (op_files if has_ops else []) + [model.CALIBRATION, model.COLLECTIVES]:
        mine = os.path.join(args.folder, os.path.basename(shipped))
        if os.path.exists(mine):
            with open(mine, "rb") as fh:
                write_bytes_atomic(shipped, fh.read())
            installed.append(os.path.basename(shipped))
        elif shipped in (model.ONE_THREAD_PICKLE, model.ONE_THREAD_META) and os.path.exists(shipped):
            os.unlink(shipped)  # op data without one-thread times: the shipped one-thread model does not describe it
    if not installed:
        raise InputError("holds no cost model files (op_timings.csv.gz, transfer_calibration.json, ...)",
                         source=args.folder)
    print(f"installed {', '.join(installed)} into {model.DATA_DIR}")
    return 0
