"""``autodist profile``: measure op timings and TensorFlow transfers on this machine.

``autodist profile ops`` runs micro-benchmarks and real training steps of zoo
models under the TensorFlow profiler, writes the timing rows and fits the op
model; ``autodist profile transfers`` measures loopback gRPC transfers and
writes the transfer calibration; ``autodist profile collectives`` does the
same for TensorFlow's CPU ring allreduce between two processes;
``autodist profile remote-steps`` measures the fixed cost of a step that one
client drives on 1-3 remote tasks; ``autodist profile loop-iterations`` what
one iteration of a loop's control costs.

Each writes into a folder of the user's (``--out``, by default
``~/.cache/autodist/cost-model``), never into the package's shipped data;
``--cost-model DIR`` (or ``$AUTODIST_COST_MODEL``) makes plan, report and
run use it, and ``autodist costmodel install DIR`` copies it over the
shipped model.
"""

import functools
import os
import shlex
import sys

from autodist.errors import InputError

ZOO_DIR = os.path.join("benchmarks", "models")


def register(subparsers):
    parser = subparsers.add_parser("profile", help="measure op and transfer costs on this machine")
    sub = parser.add_subparsers(dest="what", metavar="WHAT")
    sub.required = True

    ops = sub.add_parser("ops", help="profile micro-benchmarks and zoo training steps, fit the op model")
    ops.add_argument("--model", action="append", default=[], metavar="NAME_OR_SCRIPT",
                     help=f"a zoo model (a script in {ZOO_DIR}) or a script path; repeatable")
    ops.add_argument("--batch-size", type=int, action="append", default=[], metavar="B",
                     help="batch size of each --model, in order (default: the script's own)")
    ops.add_argument("--script-args", action="append", default=[], metavar="ARGS",
                     help="further arguments of each --model's script, in order, as one shell-quoted string "
                          "(--script-args=\"--rows 1000\")")
    ops.add_argument("--no-micro", action="store_true", help="skip the micro-benchmarks")
    ops.add_argument("--steps", type=int, default=5,
                     help="profiled steps per model (default 5); more for a small model, to span 3 s")
    ops.add_argument("--runs", type=int, default=1,
                     help="measure everything this many times and keep per-op and per-step medians (default 1)")
    ops.add_argument("--time-limit", type=float, default=600.0, metavar="S",
                     help="stop starting new measurements after S seconds (default 600)")
    ops.add_argument("--seed", type=int, default=0)
    ops.add_argument("--add", action="store_true",
                     help="keep the timings already in --out (or the shipped ones, where it has none) of the "
                          "models this run does not measure, and refit on all of them")
    _add_out(ops, "op_timings.csv.gz, op_timings.json and the fitted model")
    ops.set_defaults(func=run_ops)

    tr = sub.add_parser("transfers", help="calibrate TensorFlow transfers over loopback gRPC (medians over "
                                          "separate measurement processes)")
    tr.add_argument("--repeats", type=int, default=21, help="timed repeats per size (default 21)")
    tr.add_argument("--sessions", type=int, default=3,
                    help="measurement processes; each size keeps the median over them (default 3; whole "
                         "processes differ by up to ~50%% here, so use more on a shared machine)")
    _add_out(tr, "transfer_calibration.json")
    tr.set_defaults(func=run_transfers)

    co = sub.add_parser("collectives", help="calibrate TensorFlow's CPU ring allreduce between two processes")
    co.add_argument("--repeats", type=int, default=15, help="timed repeats per size (default 15)")
    _add_out(co, "collective_calibration.json")
    co.set_defaults(func=run_collectives)

    rs = sub.add_parser("remote-steps", help="measure the fixed cost of a step one client drives on remote tasks")
    rs.add_argument("--repeats", type=int, default=40, help="timed steps per measurement process (default 40)")
    rs.add_argument("--sessions", type=int, default=3, help="measurement processes per task count (default 3)")
    _add_out(rs, "remote_step_calibration.json")
    rs.set_defaults(func=run_remote_steps)

    li = sub.add_parser("loop-iterations", help="measure what a loop iteration's control costs (a While op's "
                                                "Merge, Switch, Identity and NextIteration per variable)")
    li.add_argument("--runs", type=int, default=15, help="timed loops per variable count (default 15)")
    _add_out(li, "loop_iteration_calibration.json")
    li.set_defaults(func=run_loop_iterations)

    el = sub.add_parser("emulated-links", help="measure TensorFlow's transfers and collective allreduces per size "
                                               "over each emulated preset's shaped link (needs root)")
    el.add_argument("--repeats", type=int, default=5, help="timed rounds over the sizes per preset (default 5)")
    _add_out(el, "emulated_link_calibration.json")
    el.set_defaults(func=run_emulated_links)


def _add_out(parser, what):
    parser.add_argument("--out", default=None, metavar="DIR",
                        help=f"folder to write {what} into (default ~/.cache/autodist/cost-model; "
                             "not the package's shipped data)")


def _out_folder(args):
    """``--out`` or the user folder; the package's shipped data is refused (installing it is a separate step)."""
    from cost_models.model import DATA_DIR, user_folder

    folder = args.out or user_folder()
    if os.path.realpath(folder) == os.path.realpath(DATA_DIR):
        raise InputError("is the package's shipped cost model data; profile into another folder, then "
                         "`autodist costmodel install DIR` to replace the shipped model", field="--out")
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise InputError("is a file, expected a folder", field="--out")
    return folder


def _script(name):
    if os.path.isfile(name):
        return name
    candidate = os.path.join(ZOO_DIR, f"{name}.py")
    if os.path.isfile(candidate):
        return candidate
    raise InputError(f"no zoo model {name!r} (looked for {candidate}) and no such script", field="--model")


def run_ops(args):
    from cost_models.profiling.transfers import machine_description
    from cost_models.model import save_default
    from cost_models.executor import EXECUTOR_SETTLE_RUNS, SETTLE_SECONDS
    from cost_models.profiling.ops import MICRO_CALLS, MICRO_ROUNDS, MIN_TIMED_SECONDS, collect

    folder = _out_folder(args)
    if args.steps < 1:
        raise InputError("must be at least 1", field="--steps")
    if args.runs < 1:
        raise InputError("must be at least 1", field="--runs")
    if args.batch_size and len(args.batch_size) != len(args.model):
        raise InputError("give one --batch-size per --model, or none", field="--batch-size")
    if args.script_args and len(args.script_args) != len(args.model):
        raise InputError("give one --script-args per --model, or none", field="--script-args")
    sizes = args.batch_size or [None] * len(args.model)
    extra = [shlex.split(a) for a in args.script_args] or [[]] * len(args.model)
    scripts = [(_script(m), [*more, *(["--batch-size", str(b)] if b else [])])
               for m, b, more in zip(args.model, sizes, extra)]
    load_before = os.getloadavg()
    rows, steps = collect(scripts, micro=not args.no_micro, steps=args.steps, seed=args.seed,
                          time_limit_s=args.time_limit, progress=lambda msg: print(msg, flush=True), runs=args.runs)
    meta = {
        "command": "autodist " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
        "machine": machine_description(),
        "steps": steps,
        "load_average": {"before": round(load_before[0], 2), "after": round(os.getloadavg()[0], 2)},
        "note": (f"kernel times are medians over the profiled steps (at least --steps, more to span "
                 f"{MIN_TIMED_SECONDS:g} s; micro-benchmarks: over "
                 f"{MICRO_ROUNDS} passes over every case, each the median of {MICRO_CALLS} calls), "
                 f"op and step times then medians over {args.runs} run(s) (every run measures the same "
                 "micro-benchmark cases); "
                 "ops ran one at a time (one inter-op thread); step_seconds: the median of as many steps "
                 "without the profiler, timed after it; default_step_seconds: the same step "
                 "under TensorFlow's default executor, timed in fresh processes before and after each profile "
                 "(at least --steps steps, more to span as long); both timed after the executor's first "
                 f"{EXECUTOR_SETTLE_RUNS} runs (its kernel cost estimates settle) where these take at most "
                 f"{SETTLE_SECONDS:g} s; "
                 "seconds_one_thread: the same kernels profiled again with one intra-op thread, in fresh processes; "
                 "Grappler remapping and arithmetic optimisation were off while profiling; "
                 "run_step_seconds ({cores: {batch: seconds}}): the step as training runs it (Grappler on), "
                 "timed as default_step_seconds in fresh processes on one core and on all, at the batch and "
                 "(where --batch-size is given) at half of it"),
    }
    if args.add:
        rows, meta = _added_to_earlier(rows, meta, folder, measured_micro=not args.no_micro)
    save_default(rows, meta, folder)
    print(f"wrote {len(rows)} rows and the fitted op model to {folder}")
    return 0


def _added_to_earlier(rows, meta, folder, measured_micro):
    """``rows`` and ``meta`` of this run added to the timings already in ``folder`` (else the shipped ones).

    The earlier rows of every model this run measured (and of the
    micro-benchmarks, where it ran them) are replaced; the earlier
    description stays, and lists this run under ``added``.  Timings of
    another machine are refused: op rows of two machines do not mix.
    """
    import numpy as np

    from cost_models.fitting.dataset import Timings, read_meta, read_timings
    from cost_models.model import DATA_DIR, TIMINGS, TIMINGS_META, in_folder

    earlier = folder if os.path.exists(in_folder(folder, TIMINGS)) else DATA_DIR
    earlier_meta = read_meta(in_folder(earlier, TIMINGS_META))
    here, there = meta["machine"], earlier_meta.get("machine") or {}
    if (here.get("cpu"), here.get("cores")) != (there.get("cpu"), there.get("cores")):
        raise InputError(f"the timings in {earlier} were measured on {there.get('cpu')} x{there.get('cores')}, "
                         f"this machine is {here.get('cpu')} x{here.get('cores')}; profile into a new folder",
                         field="--add")
    replaced = set(meta["steps"]) | ({"micro"} if measured_micro else set())
    earlier_rows = read_timings(in_folder(earlier, TIMINGS))
    kept = earlier_rows.subset(~np.isin(earlier_rows.origin, sorted(replaced)))
    added = {k: meta[k] for k in ("command", "load_average", "note")}
    merged = dict(earlier_meta, steps=dict(earlier_meta.get("steps") or {}, **meta["steps"]),
                  added=[*earlier_meta.get("added", []), dict(added, models=sorted(replaced))])
    return Timings.concat([kept, rows]), merged


def run_transfers(args):
    from cost_models.profiling.transfers import calibrate
    from cost_models.model import CALIBRATION

    if args.sessions < 1:
        raise InputError("must be at least 1", field="--sessions")
    return _calibrate(args, functools.partial(calibrate, sessions=args.sessions), CALIBRATION)


def run_collectives(args):
    from cost_models.profiling.collectives import calibrate_collectives
    from cost_models.model import COLLECTIVES

    return _calibrate(args, calibrate_collectives, COLLECTIVES)


_PRICE_SCRIPT = """
import json, sys
from autodist.cli.profile_cmd import price_local_steps
print(json.dumps(price_local_steps(sys.argv[1] or None)))
"""


def price_local_steps(folder=None):
    """Seconds the cost model of ``folder`` (cost_models.model.load_cost_model) gives the ops of the trivial job's
    step under each loop: the step captured from cost_models.profiling.loop_probe and simulated as one process on
    ``cpu-local``, without a loop cost (what the remote-step harness takes off the loops it measures)."""
    from autodist.graph.capture import capture_script
    from autodist.resource_spec import load_cluster
    from cost_models.profiling import loop_probe
    from cost_models.model import load_cost_model
    from placement.baselines import data_parallel
    from placement.problem import Problem
    from placement.simulator import Simulator

    cost_model, spec = load_cost_model(folder, with_remote_step=False), load_cluster(preset="cpu-local:1")

    def priced(loop):
        problem = Problem(capture_script(loop_probe.__file__, ["--loop", loop, "--steps", "2"]), spec, cost_model)
        return Simulator(problem).simulate(data_parallel(problem)).step_time

    return {f"{loop}_step": priced(loop) for loop in loop_probe.LOOPS}


def run_remote_steps(args):
    from cost_models.profiling.fresh_process import run_json
    from cost_models.model import REMOTE_STEP
    from cost_models.profiling.remote_step import calibrate_remote_steps

    if args.repeats < 3:
        raise InputError("must be at least 3", field="--repeats")
    if args.sessions < 1:
        raise InputError("must be at least 1", field="--sessions")
    folder = _out_folder(args)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, os.path.basename(REMOTE_STEP))
    command = "autodist " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    calibration = calibrate_remote_steps(
        lambda: run_json(_PRICE_SCRIPT, [folder], "pricing the trivial job's ops"),
        repeats=args.repeats, sessions=args.sessions, command=command)
    calibration.save(path)
    print(f"client step {calibration.base * 1e3:.2f} ms + {calibration.per_task * 1e3:.2f} ms per remote task "
          f"({len(calibration.measurements)} task counts); its CPU: client {calibration.client_cpu * 1e3:.2f} ms "
          f"+ {calibration.client_cpu_per_task * 1e3:.2f} ms per task, {calibration.task_cpu * 1e3:.2f} ms per task, "
          f"{calibration.tensor_cpu * 1e6:.0f} us + {1e9 / calibration.tensor_cpu_rate:.2f} ms per MB at each end "
          f"of a tensor; a replica's own loop {calibration.fit_step * 1e3:.2f} ms (fit) and "
          f"{calibration.function_step * 1e3:.2f} ms (tf.function), its trivial step's ops as priced taken off -> {path}")
    return 0


def run_loop_iterations(args):
    from cost_models.model import LOOP_ITERATION
    from cost_models.profiling.loop_iteration import calibrate

    if args.runs < 3:
        raise InputError("must be at least 3", field="--runs")
    folder = _out_folder(args)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, os.path.basename(LOOP_ITERATION))
    calibration = calibrate(runs=args.runs, command="autodist " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    calibration.save(path)
    print(f"loop iteration: {calibration.base * 1e6:.2f} us + {calibration.per_variable * 1e6:.3f} us per loop "
          f"variable ({len(calibration.measurements)} variable counts) -> {path}")
    return 0


def run_emulated_links(args):
    from cost_models.model import EMULATED_LINK
    from cost_models.profiling.emulated_link import calibrate_emulated_links
    from launcher.emulation import EmulatedNetwork

    if args.repeats < 1:
        raise InputError("must be at least 1", field="--repeats")
    path = os.path.join(_out_folder(args), os.path.basename(EMULATED_LINK))
    command = "autodist " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    calibration = calibrate_emulated_links(EmulatedNetwork, repeats=args.repeats, command=command)
    calibration.save(path)
    rates = ", ".join(f"{p['rate_bytes'] * 8 / 1e6:g} Mbit/s: {p['efficiency']:.0%}" for p in calibration.points)
    print(f"gRPC over emulated links achieves {rates} -> {path}")
    return 0


def _calibrate(args, calibrate, shipped_path):
    """Measure with ``calibrate(repeats=, command=)``, save under the shipped file's name, print the fitted line."""
    path = os.path.join(_out_folder(args), os.path.basename(shipped_path))
    if args.repeats < 3:
        raise InputError("must be at least 3", field="--repeats")
    command = "autodist " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    calibration = calibrate(repeats=args.repeats, command=command)
    calibration.save(path)
    print(f"overhead {calibration.overhead * 1e6:.0f} us, bandwidth {calibration.bandwidth / 1e9:.2f} GB/s "
          f"({len(calibration.measurements)} sizes) -> {path}")
    return 0
