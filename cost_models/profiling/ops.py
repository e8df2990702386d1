"""Measure op times: real training steps and micro-benchmarks under the TF profiler.

Every measurement runs a ``tf.function`` under ``tf.profiler.experimental``
and reads the kernel events of the ``/host:CPU`` (or ``/device:GPU:*``)
planes of the ``*.xplane.pb`` it writes.  Event names are
``"node_name:KernelType"``, so each timed kernel maps back to the graph op of
the same name.  Grappler's remapping (MatMul+BiasAdd+Relu fusion) is turned
off while profiling so that kernels stay one per op; ops that run no kernel
(folded constants, removed identities) are recorded without a time.

TensorFlow is imported only inside these functions.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import json
import math
import os
import statistics
import tempfile
import time

import numpy as np

from autodist.errors import AutoDistError, CaptureError, CostModelError
from autodist.graph.item import GraphItem, JobInfo
from cost_models.fitting.dataset import Timings, make_rows
from cost_models.executor import op_predecessors, settling_runs
from cost_models.profiling.fresh_process import run_json
from cost_models.features import device_peak, op_raw_features

# Grappler passes that fuse or rename ops; off while profiling.
_UNFUSED = {"remapping": False, "arithmetic_optimization": False}


@contextlib.contextmanager
def unfused_graphs():
    """Turn Grappler's op fusion off inside the block, then restore the options."""
    import tensorflow as tf

    saved = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options(_UNFUSED)
    try:
        yield
    finally:
        restore = {k: saved.get(k, True) for k in _UNFUSED}
        tf.config.optimizer.set_experimental_options(restore)


def one_op_at_a_time():
    """Run graph ops one at a time (one inter-op thread) from now on in this process.

    Each kernel then has the machine to itself, so its time is its own
    rather than stretched by whatever ran beside it, and a step's kernel
    times add up to its compute time.  Each op still uses every core
    (intra-op threads).  The step time under the default executor is
    measured beside it, in fresh processes
    (:func:`default_executor_step_seconds`).  Must run before TensorFlow
    starts its runtime.
    """
    import tensorflow as tf

    try:
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:
        if tf.config.threading.get_inter_op_parallelism_threads() != 1:
            raise CostModelError("profile before TensorFlow runs anything in this process "
                                 "(ops must run one at a time)") from None


def kernel_times(logdir):
    """Per node name, the durations (seconds) of its kernels in a profile.

    Parameters
    ----------
    logdir : str
        The folder given to ``tf.profiler.experimental.start``.

    Returns
    -------
    dict of node name -> list of (seconds, kernel type)
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))
    if not paths:
        raise CostModelError("the profiler wrote no *.xplane.pb", source=logdir)
    space = xplane_pb2.XSpace()
    with open(paths[-1], "rb") as fh:
        space.ParseFromString(fh.read())
    times = {}
    for plane in space.planes:
        if not (plane.name == "/host:CPU" or plane.name.startswith("/device:GPU")):
            continue
        for line in plane.lines:
            if plane.name == "/host:CPU" and not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                node, sep, kernel = name.rpartition(":")
                if not sep or "::" in name:
                    continue
                times.setdefault(node, []).append((event.duration_ps * 1e-12, kernel))
    return times


def profile_calls(fn, args, steps):
    """Run ``fn(*args)`` ``steps`` times under the profiler.

    Returns
    -------
    dict of node name -> (median kernel seconds per call, kernel type)
    """
    import tensorflow as tf

    with tempfile.TemporaryDirectory(prefix="autodist-profile-") as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            for _ in range(steps):
                fn(*args)
        finally:
            tf.profiler.experimental.stop()
        raw = kernel_times(logdir)
    # A node's kernel runs once per call; sum per call when it ran more often.
    return {
        node: (float(np.median([t for t, _ in ts])) * max(len(ts) // steps, 1), ts[0][1])
        for node, ts in raw.items()
    }


# Op types oneDNN fuses with their consumers (BiasAdd, Relu, ...): the fused
# kernel is reported under the last op of the chain.
FUSION_HEADS = frozenset({"Conv2D", "MatMul", "DepthwiseConv2dNative", "BatchMatMulV2", "Conv3D"})


def attribute_fused(item, measured):
    """Per-op seconds of ``item``, moving fused kernels' time to the op that heads the fusion.

    A kernel such as ``_MklNativeConv2DWithBias`` or ``_FusedMatMul``
    reported under a BiasAdd (or Relu) node, a kernel type that does not name
    the node's own op type, ran the whole Conv2D+BiasAdd(+Relu) chain; its time goes to
    the untimed Conv2D (or MatMul) it starts from, and the ops it absorbed
    count as untimed (NaN).

    Returns
    -------
    dict of op name -> seconds (only ops that ran a kernel)
    """
    seconds = {n: t for n, (t, _) in measured.items() if n in item.ops}
    for node, (t, kernel) in measured.items():
        op = item.ops.get(node)
        if op is None or not kernel.startswith("_") or op.type in kernel:
            continue
        chain, cur = [node], op
        for _ in range(3):
            inputs = cur.data_inputs
            src = item.ops.get(inputs[0].rpartition(":")[0]) if inputs else None
            if src is None or src.name in measured:
                break
            if src.type in FUSION_HEADS:
                seconds[src.name] = t
                for name in chain:
                    seconds.pop(name, None)
                break
            chain.append(src.name)
            cur = src
    return seconds


def host_device(preset="cpu-local"):
    """Device columns of rows measured on this machine's CPU.

    The figures are those of the cluster preset that describes this machine
    (engineer B's ``cpu-local``: model name, float32 peak, memory bandwidth),
    so that rows measured here carry the features the same device gets when
    a plan is searched for it.
    """
    from autodist.resource_spec import load_cluster

    device = load_cluster(preset=preset).devices("CPU")[0]
    return {
        "device_model": device.model,
        "device_kind": device.kind,
        "peak_flops": device_peak(device),
        "memory_bandwidth": float(device.memory_bandwidth),
    }


# Timed steps of a zoo model span at least this long (at most this many
# steps): this VM's slow spells last up to seconds, so ten steps of a small
# model (wide_deep's take 0.5 s) could fall inside one.
MIN_TIMED_SECONDS, MAX_TIMED_STEPS = 3.0, 1000


def steps_spanning(step_seconds, steps):
    """How many steps of ``step_seconds`` to time: ``steps``, or more to last :data:`MIN_TIMED_SECONDS`."""
    return max(steps, min(MAX_TIMED_STEPS, math.ceil(MIN_TIMED_SECONDS / max(step_seconds, 1e-9))))


def settle(fn, args, step_seconds, runs_so_far):
    """Run ``fn(*args)`` until the executor has settled (:func:`settling_runs`); whether any run was needed."""
    left = settling_runs(step_seconds) - runs_so_far
    step_wall_times(fn, args, max(left, 0))
    return left > 0


def profile_step(fn, args, item, device, origin, steps=5, warmup=2):
    """Measure one captured training step: per-op kernel times and step time.

    Parameters
    ----------
    fn : tf.function whose trace is ``item`` (the same concrete function runs)
    args : tuple of tensors
    item : GraphItem of ``fn``'s trace
    device : dict of device columns (see :func:`host_device`)
    origin : str
        The model's name, stored with every row.
    steps : int
        The least number of profiled steps; a small model's are more, to last
        :data:`MIN_TIMED_SECONDS` (:func:`steps_spanning`).  The profile
        starts before the executor's cost estimates settle, so that every
        kernel is traced; the step time is then the median of as many steps
        without the profiler, after the estimates settle where that is
        quick (:func:`settling_runs`).
    warmup : int

    Returns
    -------
    (Timings, dict)
        Rows for every op of ``item`` (untimed ops have NaN seconds) and the
        step record ``{"step_seconds", "step_repeats", "ops", "timed_ops"}``.
    """
    for _ in range(warmup):
        fn(*args)
    estimate = statistics.median(step_wall_times(fn, args, (steps + 1) // 2))
    profiled = steps_spanning(estimate, steps)
    measured = attribute_fused(item, profile_calls(fn, args, profiled))
    settle(fn, args, estimate, warmup + (steps + 1) // 2 + profiled)
    walls = step_wall_times(fn, args, profiled)
    names, raw = op_raw_features(item)
    seconds = np.array([measured.get(n, np.nan) for n in names])
    rows = make_rows(names, raw, device, origin, seconds, op_predecessors(list(item.ops.values())))
    record = {
        "step_seconds": statistics.median(walls),
        "step_repeats": profiled,
        "batch_size": item.job.batch_size,
        "structure": item.structure_hash(),
        "ops": len(names),
        "timed_ops": int(np.isfinite(seconds).sum()),
        "device_model": device["device_model"],
    }
    return rows, record


# Runs in a fresh process (the executor's threads are fixed when TensorFlow
# starts), on the first CORES of its cores where CORES > 0 (TensorFlow sizes
# its thread pools by the cores it may run on): build the zoo step, with
# Grappler's fusions off (GRAPPLER "unfused") or as training runs it, warm up,
# time the steps, print their median.
_STEP_CHILD = """
import contextlib, json, os, statistics, sys
steps, grappler, cores, script, args = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
if cores:
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:cores])
from cost_models.profiling.ops import settle, step_wall_times, steps_spanning, unfused_graphs, zoo_step
with unfused_graphs() if grappler == "unfused" else contextlib.nullcontext():
    fn, fn_args, _ = zoo_step(script, args)
    step_wall_times(fn, fn_args, 2)
    walls = step_wall_times(fn, fn_args, steps)
    estimate = statistics.median(walls)
    if settle(fn, fn_args, estimate, 2 + steps):
        walls = []  # timed before the executor settled
    walls += step_wall_times(fn, fn_args, steps_spanning(estimate, steps) - len(walls))
    print(json.dumps(statistics.median(walls)))
"""


def _child_step_seconds(script, args, steps, grappler, cores):
    return float(run_json(_STEP_CHILD, [steps, grappler, cores, os.path.abspath(script), *args],
                          "timed step", source=script, timeout=1800))


def default_executor_step_seconds(script, args=(), steps=5):
    """Median step time of a zoo script under TensorFlow's default executor (ops overlap), in a fresh process.

    At least ``steps`` steps are timed, more to span :data:`MIN_TIMED_SECONDS`,
    after the executor's cost estimates settle where that is quick
    (:func:`settling_runs`).

    :func:`collect` takes it before and after each profile of the script.

    Grappler's fusion is off, as when profiling, so that the ops are the
    profiled ones.
    """
    return _child_step_seconds(script, args, steps, "unfused", 0)


def run_step_seconds(script, args=(), steps=5, cores=0):
    """Median step time of a zoo script as training runs it (Grappler's fusions on), on ``cores`` of this
    machine's cores (0: all), in a fresh process; timed as :func:`default_executor_step_seconds`."""
    return _child_step_seconds(script, args, steps, "as-run", cores)


def run_steps(script, args, steps, batch_size):
    """``{cores: {batch: seconds}}`` (strings as keys) of a zoo script's step as training runs it
    (:func:`run_step_seconds`), on one core and on all this process may use, at ``batch_size`` and, where
    ``args`` set ``--batch-size``, at half of it too (the batch of each of two replicas).

    Replicas run a slice of the batch, and the op model's step is least sure
    away from the profiled batch: small_cnn on one core, measured 44 ms at 64
    and 25 ms at 32, was predicted 38 ms and 12 ms.
    """
    batches = [batch_size]
    if "--batch-size" in args and batch_size >= 2:
        batches.append(batch_size // 2)
    return {str(cores): {str(batch): run_step_seconds(script, with_batch_size(args, batch), steps, cores)
                         for batch in batches}
            for cores in sorted({1, len(os.sched_getaffinity(0))})}


def with_batch_size(args, batch_size):
    """Script ``args`` with ``--batch-size`` set to ``batch_size`` (the zoo scripts' flag)."""
    args = list(args)
    if "--batch-size" in args:
        i = args.index("--batch-size")
        del args[i:i + 2]
    return [*args, "--batch-size", str(batch_size)]


# Runs in a fresh process (thread pools are fixed when TensorFlow starts):
# ops one at a time as when profiling, but every kernel on one intra-op
# thread.  Profiles a zoo step or the micro-benchmarks and prints each op's
# name, type and median kernel seconds (null where none ran).
_ONE_THREAD_CHILD = """
import json, sys
import numpy as np
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(1)
from cost_models.profiling import ops as profiling
profiling.one_op_at_a_time()
what, job = sys.argv[1], json.loads(sys.argv[2])
device = profiling.host_device()
if what == "micro":
    rows = profiling.profile_micro(device, seed=job["seed"], time_limit_s=job["time_limit_s"])
else:
    rows, _ = profiling.profile_zoo_script(job["script"], device, job["args"], steps=job["steps"])
print(json.dumps({"names": rows.op_name.tolist(), "types": rows.raw["op_type"].tolist(),
                  "seconds": [float(s) if np.isfinite(s) else None for s in rows.seconds]}))
"""


def with_one_thread_seconds(rows, what, job, source):
    """``rows`` with ``seconds_one_thread`` measured in a fresh process whose kernels each get one thread.

    ``what`` is ``"zoo"`` (``job``: script, args, steps; the child's ops
    line up with ``rows`` one by one, and must agree in type) or
    ``"micro"`` (``job``: seed, time_limit_s; ops line up by ``case/op``
    name, and ops the child did not time stay NaN).
    """
    found = run_json(_ONE_THREAD_CHILD, [what, json.dumps(job)], "one-thread profile", source=source, timeout=3600)
    seconds = np.array([np.nan if s is None else s for s in found["seconds"]], dtype=np.float64)
    if what == "micro":
        by_name = dict(zip(found["names"], seconds))
        one_thread = np.array([by_name.get(n, np.nan) for n in rows.op_name], dtype=np.float64)
    elif found["types"] != rows.raw["op_type"].tolist():
        raise CostModelError("the one-thread profile captured different ops than the step's profile", source=source)
    else:
        one_thread = seconds
    return dataclasses.replace(rows, seconds_one_thread=one_thread)


def step_wall_times(fn, args, count):
    """Seconds of ``count`` calls of ``fn(*args)``, each waited for to the end."""
    walls = []
    for _ in range(count):
        t0 = time.perf_counter()
        _block(fn(*args))
        walls.append(time.perf_counter() - t0)
    return walls


def _block(result):
    import tensorflow as tf

    for t in tf.nest.flatten(result):
        if hasattr(t, "numpy"):
            t.numpy()


class _StepGrabbed(BaseException):
    """Stops a zoo script at its first step (BaseException: scripts cannot swallow it)."""


def zoo_step(script, args=()):
    """Build a zoo script's model and first batch without training (every kind of training loop's probe hook,
    :func:`autodist.loops.probing`, stops it at its first step).

    Returns
    -------
    (tf.function, tuple of tensors, model name)
        The step function (``model.train_step`` for fit scripts) and the
        arguments of one call.
    """
    from autodist import hooks, loops

    found = {}

    def grab(fn, fn_args):
        found.update(fn=fn, args=fn_args)
        raise _StepGrabbed

    try:
        with loops.probing(grab, script):
            hooks.run_script(script, args)
    except _StepGrabbed:
        pass
    if "fn" not in found:
        raise CaptureError("script finished without model.fit or a training step", source=script)
    return found["fn"], found["args"], os.path.splitext(os.path.basename(script))[0]


def profile_zoo_script(script, device, args=(), steps=5):
    """Profile a zoo script's training step; see :func:`profile_step`."""
    from autodist.graph.capture import capture_step

    with unfused_graphs():
        fn, fn_args, name = zoo_step(script, args)
        item = capture_step(fn, *fn_args, model_name=name)
        return profile_step(fn, fn_args, item, device, name, steps=steps)


# Micro-benchmark cases measured: this many times micro_cases' base counts.
MICRO_SCALE = 3
# Passes over every micro-benchmark case, and profiled calls of a case per pass.
MICRO_ROUNDS, MICRO_CALLS = 3, 3


def profile_micro(device, seed=0, time_limit_s=300.0, scale=MICRO_SCALE, rounds=MICRO_ROUNDS, calls=MICRO_CALLS):
    """Micro-benchmarks of the main op types over a spread of shapes.

    Each case is a small ``tf.function`` (forward op and, where it has one,
    its gradient ops); every op it runs is timed.  Rows are named
    ``case/op``, so that runs of the same cases line up.

    The cases are profiled in ``rounds`` passes, ``calls`` calls each, and an
    op's time is the median over the passes.  A case's calls last
    milliseconds, while this VM's slow spells last up to seconds (the same
    512x256x1024 matmul took 1.3 ms, or 2.5 ms for several cases in a row):
    passes a whole sweep apart sample the machine's speed over minutes, as
    a zoo model's profiled steps do over seconds (:data:`MIN_TIMED_SECONDS`).
    The first pass starts no new case after ``time_limit_s / rounds``; the
    later passes revisit the cases it measured.

    Returns
    -------
    Timings
    """
    import tensorflow as tf

    from autodist.graph.tfgraph import op_infos
    from cost_models.profiling.micro import micro_cases

    deadline = time.monotonic() + time_limit_s / rounds
    traced = []  # (case, tf.function, GraphItem, per-pass seconds)
    with unfused_graphs():
        for case in micro_cases(np.random.default_rng(seed), scale):
            if time.monotonic() > deadline:
                break
            fn = tf.function(case.fn)
            args = _micro_args(case)
            concrete = fn.get_concrete_function(*args)
            item = GraphItem(op_infos(concrete.graph), [], JobInfo(model_name=case.name))
            traced.append((case, fn, item, [_time_micro_case(fn, args, item, calls, warmup=2)]))
        for _ in range(rounds - 1):
            for case, fn, item, passes in traced:
                passes.append(_time_micro_case(fn, _micro_args(case), item, calls, warmup=1))
    parts = []
    for case, _, item, passes in traced:
        names, raw = op_raw_features(item)
        seconds = _median_over_runs(np.array([[p.get(n, np.nan) for n in names] for p in passes]))
        keep = np.isfinite(seconds) & ~np.isin(raw["op_type"], ("Placeholder", "Identity", "NoOp", "Const", "_Arg",
                                                                "_Retval"))
        rows = make_rows([f"{case.name}/{n}" for n in names], raw, device, "micro", seconds)
        parts.append(rows.subset(keep))
    return Timings.concat(parts)


def _micro_args(case):
    """Fresh random arguments of a micro-benchmark case: its variables, then its inputs."""
    import tensorflow as tf

    return [tf.Variable(tf.random.uniform(s)) for s in case.variables] + [
        tf.random.uniform(s, dtype=d) if d.is_floating else tf.random.uniform(s, 0, case.id_bound, dtype=d)
        for s, d in case.inputs
    ]


def _time_micro_case(fn, args, item, calls, warmup):
    """One pass over a micro-benchmark case: op name -> median kernel seconds of ``calls`` profiled calls."""
    for _ in range(warmup):
        fn(*args)
    return attribute_fused(item, profile_calls(fn, args, calls))


def collect(zoo_scripts=(), micro=True, steps=5, seed=0, time_limit_s=600.0, progress=None, device=None, runs=1):
    """Profile micro-benchmarks and zoo scripts on this machine.

    Parameters
    ----------
    zoo_scripts : list of (path, args)
        Zoo scripts and their arguments (e.g. ``["--batch-size", "4"]``).
    micro : bool
        Include the micro-benchmarks.
    steps : int
        Profiled (and separately timed) steps per zoo model.  On a CPU, each
        zoo step and the micro-benchmarks are also profiled with one
        intra-op thread (``seconds_one_thread``, see
        :func:`with_one_thread_seconds`), and each zoo step is timed whole
        as training runs it (``run_step_seconds``, see :func:`run_steps`).
    time_limit_s : float
        Stop starting new work after this long; what was measured is kept.
    progress : callable(str) or None
    device : dict or None
        Device columns; default :func:`host_device`.
    runs : int
        Measure everything this many times, minutes apart: a shared machine's
        speed drifts by more than a step's repeats show (on this VM the same
        kernel ran up to 2x slower for seconds at a time).  Every run
        measures the same micro-benchmark cases (drawn with ``seed``); each
        op's time and each step time is the median over the runs.

    Returns
    -------
    (Timings, dict)
        The rows and the ``steps`` record per zoo model.
    """
    say = progress or (lambda msg: None)
    one_op_at_a_time()
    start = time.monotonic()
    device = device or host_device()
    say(f"device {device['device_model']}: {device['peak_flops'] / 1e9:.0f} GFLOP/s peak, "
        f"{device['memory_bandwidth'] / 1e9:.1f} GB/s")
    micro_parts, zoo = [], {}
    one_thread_too = device["device_kind"] == "CPU"  # intra-op threads are CPU threads
    for run in range(runs):
        if micro:
            budget = time_limit_s / (3 * runs)
            rows = profile_micro(device, seed=seed, time_limit_s=budget)
            if one_thread_too:
                rows = with_one_thread_seconds(rows, "micro", {"seed": seed, "time_limit_s": budget},
                                               "micro-benchmarks")
            micro_parts.append(rows)
            say(f"run {run + 1}/{runs}: micro-benchmarks: {len(rows)} timed ops after {time.monotonic() - start:.0f} s")
        for script, args in zoo_scripts:
            name = os.path.splitext(os.path.basename(script))[0]
            if time.monotonic() - start > time_limit_s:
                say(f"run {run + 1}/{runs}: time limit reached, skipping {name}")
                continue
            try:
                # Under the default executor the step is timed before and after the
                # profile, as the profiled steps are, and the run keeps the mean.
                before = default_executor_step_seconds(script, args, steps)
                rows, record = profile_zoo_script(script, device, args, steps=steps)
                after = default_executor_step_seconds(script, args, steps)
                record["default_step_seconds"] = (before + after) / 2
                if one_thread_too:
                    record["run_step_seconds"] = run_steps(script, args, steps, record["batch_size"])
                    rows = with_one_thread_seconds(rows, "zoo", {"script": os.path.abspath(script),
                                                                 "args": list(args), "steps": steps}, script)
            except AutoDistError as exc:
                say(f"run {run + 1}/{runs}: skipping {name}: {exc}")
                continue
            zoo.setdefault(name, []).append((rows, dict(record, args=list(args))))
            say(f"run {run + 1}/{runs}: {name}: step {record['step_seconds'] * 1e3:.1f} ms one op at a time, "
                f"{record['default_step_seconds'] * 1e3:.1f} ms default executor, "
                f"{record['timed_ops']} of {record['ops']} ops timed")
    parts = [_median_of_micro_runs(micro_parts)] if any(len(p) for p in micro_parts) else []
    steps_record = {}
    for name, measured in zoo.items():
        rows, record = _median_of_runs(measured)
        parts.append(rows)
        steps_record[name] = record
    return Timings.concat(parts), steps_record


def _median_of_runs(measured):
    """One model's rows and step record from several runs: per-op and step medians."""
    rows, record = measured[0]
    if len(measured) == 1:
        return rows, dict(record, runs=1)
    # Keras names a model's layers anew in every run (mlp_1, mlp_2, ...): runs
    # must agree op by op in type and sizes, not in name.
    same = [np.array_equal(r.raw[c], rows.raw[c]) for r, _ in measured[1:] for c in ("op_type", "flops", "output_bytes")]
    if not all(same):
        raise CostModelError("runs captured different ops; the step is not the same in every run",
                             source=str(rows.origin[0]))
    median = _median_over_runs(np.stack([r.seconds for r, _ in measured]))
    one_thread = _median_over_runs(np.stack([r.seconds_one_thread for r, _ in measured]))
    step_runs = [r["step_seconds"] for _, r in measured]
    default_runs = [r["default_step_seconds"] for _, r in measured]
    merged = dict(record, runs=len(measured), timed_ops=int(np.isfinite(median).sum()),
                  step_seconds=statistics.median(step_runs), step_seconds_per_run=step_runs,
                  default_step_seconds=statistics.median(default_runs), default_step_seconds_per_run=default_runs)
    if "run_step_seconds" in record:
        merged["run_step_seconds"] = {
            cores: {batch: statistics.median(r["run_step_seconds"][cores][batch] for _, r in measured)
                    for batch in by_batch}
            for cores, by_batch in record["run_step_seconds"].items()}
    return dataclasses.replace(rows, seconds=median, seconds_one_thread=one_thread), merged


def _median_of_micro_runs(parts):
    """Micro-benchmark rows of several runs of the same cases, lined up by ``case/op`` name: per-op medians."""
    rows = Timings.concat(parts)  # leaves empty runs out; their row of ``seconds`` stays NaN
    names, first, column = np.unique(rows.op_name.astype(str), return_index=True, return_inverse=True)
    run = np.repeat(np.arange(len(parts)), [len(p) for p in parts])
    order = np.sort(first)

    def median(values):
        table = np.full((len(parts), len(names)), np.nan)
        table[run, column] = values
        return _median_over_runs(table)[column[order]]

    return dataclasses.replace(rows.subset(order), seconds=median(rows.seconds),
                               seconds_one_thread=median(rows.seconds_one_thread))


def _median_over_runs(seconds):
    """Per op (column of ``seconds``, one row per run or pass), the median over the rows that timed it; NaN if none did."""
    timed = np.isfinite(seconds)
    median = np.full(seconds.shape[1], np.nan)
    for j in np.flatnonzero(timed.any(axis=0)):
        median[j] = np.median(seconds[timed[:, j], j])
    return median
