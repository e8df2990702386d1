"""``autodist costmodel eval [--json]``: how good the shipped cost models are; ``costmodel fit-gpu``: refit the GPU model."""

import json


def register(subparsers):
    parser = subparsers.add_parser("costmodel", help="evaluate the cost models")
    sub = parser.add_subparsers(dest="what", metavar="WHAT")
    sub.required = True
    ev = sub.add_parser("eval", help="held-out op error, leave-one-model-out step error, allreduce bus bandwidth")
    ev.add_argument("--json", action="store_true", help="print the report as JSON")
    ev.add_argument("--data", default=None, metavar="DIR",
                    help="folder with op_timings.csv.gz and op_timings.json (default: the shipped data)")
    ev.add_argument("--gpu-calibration", default=None, metavar="CSV",
                    help="published single-GPU figures to judge the GPU model on (default: the shipped calibration set)")
    ev.set_defaults(func=run_eval)
    fit = sub.add_parser("fit-gpu", help="fit the GPU kernel model on the published calibration figures")
    fit.add_argument("--calibration", default=None, metavar="CSV",
                     help="published single-GPU figures (default: the shipped calibration set)")
    fit.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the fitted parameters (JSON)")
    fit.set_defaults(func=run_fit_gpu)


def run_eval(args):
    from cost_models.evaluation import evaluate, format_report

    report = evaluate(args.data, gpu_calibration=args.gpu_calibration)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        print(format_report(report))
    return 0


def run_fit_gpu(args):
    from autodist.io import write_json_atomic
    from cost_models.gpu_calibration import fit, prepared
    from cost_models.published import CALIBRATION_CSV, read_calibration

    params = fit(prepared(read_calibration(args.calibration or CALIBRATION_CSV)))
    write_json_atomic(args.output, params.to_dict())
    print(f"{args.output}: fitted on {len(params.fitted_on)} published figures ({params.source})")
    return 0
