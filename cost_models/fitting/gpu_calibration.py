"""Fitting the GPU kernel model on the published figures, and judging it.

:func:`fit` finds the :class:`~cost_models.gpu.GpuKernelParams` whose
predicted single-GPU throughputs best match the evaluated rows of the
calibration set (cost_models.fitting.published), by robust least squares on the log
of predicted over published throughput.  The architecture factors are held
towards 1 (a ridge term), so that an architecture with few rows (Hopper)
stays near the shared values, and the efficiencies, more loosely, towards
their starting values.  :func:`evaluate` prints every row with its
prediction from the fit on all rows, from a fit that left its model out,
and from the roofline prior alone; plus the AMP-over-FP32 ratios and the
memory checks; and the held-out figures of the validation file
(cost_models.fitting.published), priced by the fit on every calibration row.
"""

from __future__ import annotations

import numpy as np

from autodist.errors import CostModelError
from cost_models.gpu import PER_ARCHITECTURE, SHARED, GpuKernelParams, job_step, runs_as
from cost_models.memory import step_peak_bytes
from cost_models.prior import prior_seconds
from cost_models.fitting.published import VALIDATION_CSV, published_step, read_calibration, run_job
from cost_models.step_table import fuses_elementwise

# Starting values and bounds of the fit (efficiencies are fractions of peak; their start is also their prior).
# Held, not fitted: a Keras job's memory-bound kernels stream at this fraction of peak bandwidth (as the
# roofline prior assumes, cost_models.prior).  The published runs ran other kernels than the Keras graphs
# we capture, so they cannot tell it apart from their frameworks' fusion factors, which are fitted relative to it.
FIXED = {"memory": 0.8}
START = {"matmul_half": 0.5, "matmul_tf32": 0.5, "matmul_fp32": 0.7, "conv_half": 0.5, "conv_tf32": 0.5,
         "conv_fp32": 0.7, "winograd": 1.0, "memory": FIXED["memory"], "half_flops": 1e8, "launch": 5e-6,
         "xla_memory": 0.5, "fused_pytorch": 0.7}
EFFICIENCY = (0.02, 1.0)
# cuDNN's FFT convolutions (and the Winograd ones, which have their own factor) do fewer multiplies than the direct
# FLOP count, so a convolution class may run above its nominal efficiency.
CONV_EFFICIENCY = (0.02, 2.25)
# A kernel launch costs the host "a few us" (../shared/reference/hardware.md): at most 5 us here.  The rows hardly
# tell launches from small products' inefficiency (the fit ends at this bound); unbounded, a fit without BERT-large's
# rows (G10-G18: about 15,000 short kernels a step) explained the slow G19/G20 runs by 45 us launches.
LAUNCH = (5e-7, 5e-6)
# A fuser's factor on the memory-bound kernels left after its chains (cost_models.gpu): the same wide range for
# each, XLA's included (its kernels left may stream slower than the Keras graph's, as FusedBatchNorm's do).
FUSED = (0.05, 4.0)
# A Winograd convolution's speed over its class's (cost_models.winograd): from none (the start, where no figure has
# one: ResNeXt's grouped convolutions are not) to the 4x fewer multiplies of F(4x4, 3x3).
WINOGRAD = (1.0, 4.0)
BOUNDS = {"matmul_half": EFFICIENCY, "matmul_tf32": EFFICIENCY, "matmul_fp32": EFFICIENCY,
          "conv_half": CONV_EFFICIENCY, "conv_tf32": CONV_EFFICIENCY, "conv_fp32": CONV_EFFICIENCY,
          "winograd": WINOGRAD,
          "half_flops": (1e5, 1e11),
          "launch": LAUNCH, "xla_memory": FUSED, "fused_pytorch": FUSED}
FREE = tuple(k for k in SHARED if k not in FIXED)
# Log-throughput residuals beyond ~30% weigh less, and less the larger they are (Cauchy loss): a source the
# shared physics does not match does not drag the parameters every other model shares (G20/amp, DLPerf's BERT-base
# AMP run without XLA, was 1.5x slower than the model until its step was captured as TensorFlow's AMP graph rewrite
# leaves it, autodist.graph.amp_rewrite: its layer norms, GELU and softmax in float32).  With soft L1,
# whose pull does not fade, a fit without BERT-large's rows slowed every small kernel to match them and missed
# BERT-large by 20-50%.  At a 10% scale the fit sides with one source where two models disagree (without BERT-large,
# PyTorch's fast BERT-base G34 set matmul_half at its bound and G20/amp-xla was given up) instead of weighing them:
# 30% is about the spread between frameworks on one model and GPU (G4/amp TF 1100 vs G30/amp PyTorch 833 img/s,
# a gap the model now explains by G30's NCHW transposes, cost_models.gpu).
ROBUST_SCALE = 0.3
ARCH_BOUNDS = (0.25, 4.0)
EFFICIENCIES = ("matmul_half", "matmul_tf32", "matmul_fp32", "conv_half", "conv_tf32", "conv_fp32")
# An efficiency held towards its start, so that one the rows hardly identify stays there instead of drifting to a
# bound (without BERT-large, only ResNets' final dense layers run TF32 matrix products, and matmul_tf32 went to
# 1.0), and no more: a factor of 2 off the start weighs as much as a 10% miss on one row.  At a factor e^2 (as
# before) the start weighed as much as a row, and an efficiency one model's rows decide was pulled halfway back:
# without ResNeXt, conv_tf32 stopped at 0.36 with ResNet-50's TF32 row (G5/tf32) 26% off, and ResNeXt's (G9/tf32)
# came out 55% fast.
EFFICIENCY_PRIOR_SIGMA = np.log(2.0) / 0.1
ARCH_PRIOR_SIGMA = 0.5  # log-scale spread allowed to an architecture factor by the ridge term
# AMP over FP32 throughput pairs (same software, same GPU) checked against the published ratio.
PRECISION_RATIOS = (("ResNet-50, V100 (XLA)", "G2/amp", "G1/fp32"), ("ResNet-50, V100", "G4/amp", "G3/fp32"),
                    ("ResNet-50, A100 (XLA)", "G6/amp", "G5/tf32"))
# A configuration published runs could not use: ResNet-50 at batch 256 in float32 on a 16 GB V100
# (NVIDIA's scripts use batch 128 there, G1/G3).
MUST_NOT_FIT = ("resnet50-fp32", "V100-16GB", 256)
# How every row is priced (the ``user_path`` figures of :func:`evaluate`).
USER_PATH = ("each row's job is its zoo script's capture (cached by benchmarks/gpu_published_graphs.py) at the row's "
             "batch with the row's --xla and --micro-batches (and a PyTorch row's kernels), priced by "
             "cost_models.gpu.job_step on one GPU of the row's device, as placement report prices it "
             "(tests/test_one_path.py: the report prints the same throughput)")
# A kernel class is calibrated on an architecture where it takes at least this share of a fitted figure's kernel time.
COVERAGE_SHARE = 0.1


def device_of(model):
    """A DeviceSpec of the preset device model ``model`` (e.g. "V100-16GB")."""
    from autodist.resource_spec.presets import DEVICE_MODELS

    return DEVICE_MODELS[model].device(model, "published", 0)


def published_gpu_step(run, table, scalars):
    """The :class:`GpuStep` of a published run (single- or multi-GPU) on its step ``table``, built as a user's
    ``placement report`` builds it (cost_models.gpu.job_step) from the run's job (published.run_job).

    Raises CostModelError where the job would not run at the precision the row says.
    """
    job, device = run_job(run, scalars), device_of(run.device)
    check_precision(run, job)
    return job_step(table, job, device, xla="job" if run.xla is not None else None)


def check_precision(run, job):
    """Raise CostModelError where ``job`` (the JobInfo of ``run``'s capture) would not run at the precision the
    row says on the row's device."""
    runs = runs_as(job.precision or "fp32", device_of(run.device))
    if runs != run.precision:
        raise CostModelError(f"row {run.id}: the captured {run.config} job runs at {runs} on {run.device}, "
                             f"not {run.precision}", field="precision")


def prepared(runs):
    """``(run, GpuStep)`` for every evaluated run."""
    return [(run, published_gpu_step(run, *published_step(run)).kernels_only()) for run in runs if run.evaluated]


def throughput(step, run, params):
    """Predicted samples per second of ``run``."""
    return run.batch * run.micro_batches / step.step_seconds(params)


def _unpack(x, archs):
    shared = dict(FIXED, **dict(zip(FREE, np.exp(x[:len(FREE)]))))
    factors = np.exp(x[len(FREE):]).reshape(len(archs), len(PER_ARCHITECTURE))
    return GpuKernelParams(shared, {a: dict(zip(PER_ARCHITECTURE, f)) for a, f in zip(archs, factors)})


def fit(steps):
    """Fitted :class:`GpuKernelParams` on ``steps`` (from :func:`prepared`).

    Robust least squares (Cauchy loss) on the log of predicted over published
    throughput, plus ridge terms that hold each efficiency towards its start
    and each architecture factor towards 1.
    """
    from scipy.optimize import least_squares

    archs = sorted({s.architecture for _, s in steps if s.architecture})
    factors = len(archs) * len(PER_ARCHITECTURE)
    x0 = np.log([START[k] for k in FREE] + [1.0] * factors)
    lower = np.log([BOUNDS[k][0] for k in FREE] + [ARCH_BOUNDS[0]] * factors)
    upper = np.log([BOUNDS[k][1] for k in FREE] + [ARCH_BOUNDS[1]] * factors)
    published = np.log([run.throughput for run, _ in steps])
    held = [FREE.index(k) for k in EFFICIENCIES]

    def residuals(x):
        params = _unpack(x, archs)
        predicted = np.log([throughput(s, run, params) for run, s in steps])
        return np.concatenate([predicted - published, (x[held] - x0[held]) / EFFICIENCY_PRIOR_SIGMA,
                               x[len(FREE):] / ARCH_PRIOR_SIGMA])

    result = least_squares(residuals, x0, bounds=(lower, upper), x_scale=1.0, loss="cauchy", f_scale=ROBUST_SCALE)
    params = _unpack(result.x, archs)
    params.coverage = _coverage(steps, params)
    params.fitted_on = [run.id for run, _ in steps]
    params.source = "published-training-figures.md rows " + ", ".join(sorted({run.row for run, _ in steps}, key=_row_key))
    return params


def _coverage(steps, params):
    """Architecture -> the kernel classes that take :data:`COVERAGE_SHARE` of some fitted figure's kernel time."""
    covered = {}
    for _, step in steps:
        kernel, _ = step.shares(params)
        classes = step.kernel_classes()
        for kernel_class in set(classes) - {""}:
            if kernel[classes == kernel_class].sum() >= COVERAGE_SHARE * kernel.sum():
                covered.setdefault(step.architecture, set()).add(kernel_class)
    return {arch: sorted(classes) for arch, classes in sorted(covered.items())}


def _row_key(row):
    return (row[0], int(row[1:]))


def _prior_throughput(step_table, run):
    """Samples per second of ``run`` priced by the roofline prior alone (float32 peak, 5 us per op)."""
    device = device_of(run.device)
    seconds, _ = prior_seconds(step_table, "GPU", device.peak_flops["float32"], device.memory_bandwidth)
    seconds = np.where(step_table["unread"] > 0, 0.0, seconds)
    update = step_table["phase"] == "update"
    step = run.micro_batches * seconds[~update].sum() + seconds[update].sum()
    return run.batch * run.micro_batches / step


def evaluate(runs=None, validation=None):
    """The ``gpu_published`` report: every calibration row, leave-one-model-out errors, ratios, memory; and the
    held-out figures of ``validation`` (default: the shipped validation file), priced by the fit on every
    calibration row and never fitted on.  Every row is priced through the user's path (``user_path``:
    :data:`USER_PATH`); there is no other."""
    runs = read_calibration() if runs is None else runs
    validation = read_calibration(VALIDATION_CSV) if validation is None else validation
    steps = prepared(runs)
    everything = fit(steps)
    left_out = {}
    for model in sorted({run.model for run, _ in steps}):
        params = fit([(r, s) for r, s in steps if r.model != model])
        for run, step in steps:
            if run.model == model:
                left_out[run.id] = throughput(step, run, params)
    step_of = dict(steps)
    rows = []
    for run in runs:
        row = _row(run)
        if run.evaluated:
            step = step_of[run]
            table, _ = published_step(run)
            lomo, prior = left_out[run.id], _prior_throughput(table, run)
            row.update(_predicted(run, step, everything))
            row.update({"predicted_left_out": lomo, "error_left_out": lomo / run.throughput - 1,
                        "prior": prior, "error_prior": prior / run.throughput - 1})
        rows.append(row)
    evaluated = [r for r in rows if "predicted" in r]
    summary = {
        "rows": len(rows), "evaluated": len(evaluated),
        "median_error_left_out": _median_abs(r["error_left_out"] for r in evaluated),
        "max_error_left_out": _max_abs(r["error_left_out"] for r in evaluated),
        "median_error_fit": _median_abs(r["error"] for r in evaluated),
        "max_error_fit": _max_abs(r["error"] for r in evaluated),
        "median_error_prior": _median_abs(r["error_prior"] for r in evaluated),
        "max_error_prior": _max_abs(r["error_prior"] for r in evaluated),
        "all_fit_in_memory": all(r["fits"] for r in evaluated),
    }
    held_out = [dict(_row(run), **_predicted(run, step, everything)) for run, step in prepared(validation)]
    user_path = {"how": USER_PATH, **{k: summary[k] for k in ("median_error_left_out", "max_error_left_out",
                                                               "median_error_fit", "max_error_fit")}}
    return {"summary": summary, "user_path": user_path, "rows": rows, "precision_ratios": _ratios(rows), "memory_check": _must_not_fit(runs),
            "validation": {"rows": held_out, "median_error": _median_abs(r["error"] for r in held_out),
                           "max_error": _max_abs(r["error"] for r in held_out)},
            "parameters": everything.to_dict()}


def _row(run):
    return {"id": run.id, "model": run.model, "device": run.device, "precision": run.precision, "xla": run.xla,
            "framework": run.framework, "layout": run.layout, "batch": run.batch, "micro_batches": run.micro_batches,
            "published": run.throughput, "unit": run.unit, "note": run.note}


def _predicted(run, step, params):
    """The prediction of an evaluated run with ``params``, its error and its predicted peak memory."""
    table, scalars = published_step(run)
    predicted = throughput(step, run, params)
    peak, memory = _published_peak(table, scalars, run), device_of(run.device).memory_bytes
    return {"predicted": predicted, "error": predicted / run.throughput - 1, "peak_memory_bytes": peak,
            "memory_bytes": memory, "fits": peak <= memory}


def _published_peak(table, scalars, run):
    persistent = scalars["parameter_bytes"] + scalars["slot_bytes"]
    job = run_job(run, scalars)
    return step_peak_bytes(table, persistent, scalars["parameter_bytes"], run.micro_batches, run.precision,
                           fused_kernels=fuses_elementwise(run.xla, job.framework))


def _ratios(rows):
    by_id = {r["id"]: r for r in rows if "predicted" in r}
    out = []
    for label, amp, fp32 in PRECISION_RATIOS:
        if amp not in by_id or fp32 not in by_id:
            continue
        a, f = by_id[amp], by_id[fp32]
        published = a["published"] / f["published"]
        predicted = a["predicted"] / f["predicted"]
        out.append({"pair": label, "rows": [amp, fp32], "published": published, "predicted": predicted,
                    "error": predicted / published - 1})
    return out


def _must_not_fit(runs):
    from dataclasses import replace

    config, device, batch = MUST_NOT_FIT
    template = next((r for r in runs if r.config == config), None)
    if template is None:
        return None
    run = replace(template, device=device, batch=batch, micro_batches=1, precision="fp32")
    table, scalars = published_step(run)
    peak = _published_peak(table, scalars, run)
    memory = device_of(device).memory_bytes
    return {"config": config, "device": device, "batch": batch, "peak_memory_bytes": peak, "memory_bytes": memory,
            "fits": peak <= memory}


def _median_abs(values):
    values = [abs(v) for v in values]
    return float(np.median(values)) if values else float("nan")


def _max_abs(values):
    values = [abs(v) for v in values]
    return float(max(values)) if values else float("nan")

