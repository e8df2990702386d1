"""``autodist costmodel eval [--json]``: how good the shipped cost models are; ``costmodel fit-gpu``: refit the GPU model;
``costmodel collective``: one predicted collective, as nccl-tests reports it; ``costmodel install DIR``."""

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
    ev.add_argument("--gpu-calibration", default=None, metavar="CSV",
                    help="published single-GPU figures to judge the GPU model on (default: the shipped calibration set)")
    ev.add_argument("--cluster-rows", nargs="+", default=None, metavar="ROW",
                    help="evaluate only these multi-GPU rows of the calibration set (ids such as M9/amp-4n, or whole "
                         "rows such as M42), the constants fitted on them (default: every row)")
    ev.add_argument("--section", default=None,
                    choices=("gpu_published", "collectives_published", "cluster_published"),
                    help="compute and print only this section (it needs only the shipped data)")
    ev.set_defaults(func=run_eval)
    fit = sub.add_parser("fit-gpu", help="fit the GPU kernel model on the published calibration figures")
    fit.add_argument("--calibration", default=None, metavar="CSV",
                     help="published single-GPU figures (default: the shipped calibration set)")
    fit.add_argument("-o", "--output", required=True, metavar="FILE", help="where to write the fitted parameters (JSON)")
    fit.set_defaults(func=run_fit_gpu)
    _register_collective(sub)
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
    from cost_models.fitting.evaluation import evaluate, evaluate_section, format_report, section_lines
    from placement.baselines import AllreducePricer

    if args.section:
        section = evaluate_section(args.section, AllreducePricer, args.cluster_rows)
        print(json.dumps({args.section: section}, indent=1, sort_keys=True) if args.json
              else "\n".join(section_lines(args.section, section)))
        return 0
    report = evaluate(AllreducePricer, args.data, gpu_calibration=args.gpu_calibration, cluster_rows=args.cluster_rows)
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
    else:
        print(format_report(report))
    return 0


def run_fit_gpu(args):
    from autodist.io import write_json_atomic
    from cost_models.fitting.gpu_calibration import fit, prepared
    from cost_models.fitting.published import CALIBRATION_CSV, read_calibration

    params = fit(prepared(read_calibration(args.calibration or CALIBRATION_CSV)))
    write_json_atomic(args.output, params.to_dict())
    print(f"{args.output}: fitted on {len(params.fitted_on)} published figures ({params.source})")
    return 0


def _register_collective(sub):
    from autodist.cli.cluster_args import add_cluster_arguments

    col = sub.add_parser("collective", help="predicted time, algbw and busbw of one collective (a virtual nccl-tests)",
                         description="Predict one collective on a cluster, as nccl-tests would report it: time, "
                                     "algbw = bytes / time and busbw = algbw times the collective's bus factor.")
    add_cluster_arguments(col)
    col.add_argument("--op", required=True, metavar="OP", help="allreduce, allgather, reducescatter or broadcast")
    col.add_argument("--bytes", required=True, metavar="N", help="the message size in bytes (nccl-tests' size)")
    col.add_argument("--devices", nargs="+", metavar="DEVICE",
                     help="the ranks, e.g. node-0/GPU:0 node-0/GPU:1 (default: every GPU, else every CPU)")
    col.add_argument("--format", choices=("text", "json"), default="text", help="output format (default: text)")
    col.set_defaults(func=run_collective)


def run_collective(args):
    from autodist.errors import InputError
    from autodist.cli.cluster_args import cluster_from_args
    from cost_models import CostModel
    from cost_models.comm import bus_factor

    try:
        nbytes = int(args.bytes)
    except ValueError:
        raise InputError(f"must be a whole number of bytes, got {args.bytes!r}", field="--bytes") from None
    if nbytes <= 0:
        raise InputError(f"must be positive, got {nbytes}", field="--bytes")
    spec = cluster_from_args(args)
    devices = list(dict.fromkeys(args.devices or [d.name for d in spec.compute_devices()]))
    phases = CostModel.default().comm_model(spec).collective_phases(args.op, nbytes, devices)
    seconds = sum(p.seconds for p in phases)
    algbw = nbytes / seconds
    result = {"op": args.op, "bytes": nbytes, "devices": devices, "time": seconds, "algbw": algbw,
              "busbw": algbw * bus_factor(args.op, len(devices))}
    if args.format == "json":
        print(json.dumps(result, indent=1))
    else:
        print(f"{args.op} of {nbytes} bytes over {len(devices)} devices of {spec.name or 'the cluster'}: "
              f"time {seconds * 1e3:.3f} ms, algbw {algbw / 1e9:.2f} GB/s, busbw {result['busbw'] / 1e9:.2f} GB/s")
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
    for shipped in (op_files if has_ops else []) + [model.CALIBRATION, model.COLLECTIVES, model.LOOP_ITERATION]:
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
