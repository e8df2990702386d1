"""How good are the cost models?  Held-out op error, step-level error, bus bandwidth.

- Per-op MAPE on a random 20% of the timed rows held out from fitting, for
  ops of at least 50 us (the learned model beside the roofline prior), and
  the same for the one-thread model that gives the executor model its op
  widths.
- Leave one zoo model out: fit the op models, the executor overhead and the
  executor model on every other model's rows and steps, predict the
  left-out model's step compute time as the simulator charges one device
  (the sum of the ops' ``CostModel`` step shares) and compare it with the
  step measured under TensorFlow's default executor (the target).  Beside
  it: the sum of the ops' standalone times against the step measured with
  ops one at a time, as profiled; and the executor model alone (the
  left-out model's measured op times and widths through the schedule),
  which tells the op model's error from the overlap model's.
- Predicted allreduce bus bandwidth of the 8-GPU H100 and A100 node presets
  against the nccl-tests figures of ../shared/reference/hardware.md.
- ``gpu_published``: the GPU kernel model against every published single-GPU
  figure of the calibration set (cost_models.fitting.gpu_calibration): fitted on all
  rows, fitted without the row's model (the target), and the roofline prior
  alone; AMP over FP32 ratios; whether each configuration fits its GPU; and
  the held-out published figures of the validation file, never fitted on.
- ``collectives_published``: allreduce busbw against the published nccl-tests
  rows, leave one system out (cost_models.fitting.collectives_published).
- ``cluster_published``: multi-GPU throughput and scaling efficiency against
  the published multi-GPU rows, in sample and leave one system out
  (cost_models.fitting.cluster_published).  :func:`evaluate_section` computes one of
  these two alone.
"""

from __future__ import annotations

import os

import numpy as np

from autodist.errors import CostModelError
from cost_models.fitting.dataset import read_meta, read_timings
from cost_models.features import design_matrix
from cost_models.model import (DEFAULT_PARAMS, TIMINGS, TIMINGS_META, CostModel, fit_cost_model, fit_one_thread_model,
                               fit_op_model, measured_step, profiled_cores)
from cost_models.prior import prior_seconds

MIN_OP_SECONDS = 50e-6
HOLDOUT_FRACTION = 0.2

# nccl-tests all_reduce_perf busbw, large messages, ring (hardware.md,
# "Collective measurements"): 8x H100 SXM ~370 GB/s; 8x A100 SXM ~200-208 GB/s.
NCCL_BUSBW = {"dgx-h100": 370e9, "dgx-a100": 204e9}
BUSBW_MESSAGE_BYTES = 8 * 2**30


def _prior(rows):
    kinds = set(rows.device_kind)
    out = np.empty(len(rows))
    for kind in kinds:
        mask = rows.device_kind == kind
        sub = {k: v[mask] for k, v in rows.raw.items()}
        out[mask] = prior_seconds(sub, kind, rows.peak_flops[mask], rows.memory_bandwidth[mask])[0]
    return out


def _mape(pred, true):
    return float(np.mean(np.abs(pred - true) / true))


def op_holdout(timings, params=DEFAULT_PARAMS, seed=0):
    """Per-op error of kernel times on held-out rows (a random split of all rows), also with one thread."""
    rng = np.random.default_rng(seed)
    test = rng.random(len(timings)) < HOLDOUT_FRACTION
    model = fit_op_model(timings.subset(~test), params)
    held = timings.subset(test).timed()
    big = held.seconds >= MIN_OP_SECONDS
    X = design_matrix(held.raw, held.peak_flops, held.memory_bandwidth)
    pred = model.predict(X, ran_kernel=True)
    one_thread_model = fit_one_thread_model(timings.subset(~test), params)
    one = np.isfinite(held.seconds_one_thread) & (held.seconds_one_thread >= MIN_OP_SECONDS)
    one_thread_mape = (_mape(one_thread_model.predict(X[one], ran_kernel=True), held.seconds_one_thread[one])
                       if one_thread_model is not None and one.any() else None)
    by_type = {}
    for t in sorted(set(held.raw["op_type"][big])):
        m = big & (held.raw["op_type"] == t)
        by_type[t] = {"rows": int(m.sum()), "mape": _mape(pred[m], held.seconds[m])}
    return {
        "train_rows": int((~test).sum()),
        "test_rows": int(test.sum()),
        "test_rows_at_least_50us": int(big.sum()),
        "mape": _mape(pred[big], held.seconds[big]) if big.any() else None,
        "prior_mape": _mape(_prior(held)[big], held.seconds[big]) if big.any() else None,
        "median_ape": float(np.median(np.abs(pred[big] - held.seconds[big]) / held.seconds[big])) if big.any() else None,
        "one_thread_rows_at_least_50us": int(one.sum()),
        "one_thread_mape": one_thread_mape,
        "by_op_type": by_type,
    }


def _predicted_steps(cost_model, rows):
    """Predicted compute seconds of the one-device step whose ops are ``rows`` (one model, in graph order).

    Returns ``(sequential, overlapped)``: the sum of the ops' standalone
    seconds (ops one after another) and the sum of their step shares (as the
    device's executor runs them; what the simulator charges the device).
    """
    kind, model = rows.device_kind[0], rows.device_model[0]
    seconds, _, shares = cost_model.predict_step(rows.raw, rows.predecessors(), kind, model, rows.peak_flops[0],
                                                 rows.memory_bandwidth[0])
    return float(seconds.sum()), float(shares.sum())


def _errors(predicted, measured, runs):
    """Error of ``predicted`` against the median ``measured``; ``runs``: each profiling run's measurement."""
    runs = [float(r) for r in runs] or [measured]
    return {"predicted_seconds": predicted, "measured_seconds": measured,
            "error": abs(predicted - measured) / measured, "signed_error": (predicted - measured) / measured,
            "measured_runs_seconds": runs, "runs_spread": max(runs) / min(runs) - 1.0}


def leave_one_model_out(timings, steps, params=DEFAULT_PARAMS, cores=None):
    """Step-level error per zoo model, with everything fitted without it.

    The op models, the executor overhead and (given ``cores``, the profiled
    machine's) the executor model are fitted on the other models' rows and
    steps.  Two comparisons per model: the step as TensorFlow's default
    executor runs it (the target) and with ops one at a time, as profiled.
    """
    results = {}
    known = {name: r for name, r in steps.items() if (timings.origin == name).any()}
    for name, record in sorted(known.items()):
        mine = timings.origin == name
        rest = timings.subset(~mine)
        others = {o: r for o, r in known.items() if o != name}
        if len(rest.timed()) == 0 or len(others) < 2:
            continue
        cost_model = fit_cost_model(rest, others, cores, params)
        overhead, executor = cost_model.executor_overhead, cost_model.executor
        rows = timings.subset(mine)
        sequential, overlapped = _predicted_steps(cost_model, rows)
        timed = np.isfinite(rows.seconds)
        results[name] = {
            "one_op_at_a_time": _errors(sequential, float(record["step_seconds"]), record.get("step_seconds_per_run", [])),
            "executor_overhead_per_op_seconds": overhead,
            "executor_serial_overhead_seconds": executor.serial_overhead if executor else None,
            "ops": int(len(rows)),
            "timed_ops": int(timed.sum()),
            "measured_kernel_sum_seconds": float(rows.seconds[timed].sum()),
            "prior_sum_seconds": float(_prior(rows).sum()),
        }
        if executor is not None and "default_step_seconds" in record:
            default, runs = float(record["default_step_seconds"]), record.get("default_step_seconds_per_run", [])
            results[name]["default_executor"] = _errors(overlapped, default, runs)
            # The executor model alone: the model's own measured op times and widths through the schedule.
            alone = executor.schedule(*measured_step(rows, overhead, executor.cores))[0]
            results[name]["executor_on_measured_ops"] = _errors(alone, default, runs)
    return {"models": results, **_summary(results, "default_executor"), **_summary(results, "one_op_at_a_time"),
            **_summary(results, "executor_on_measured_ops")}


def _summary(results, setting):
    errors = [r[setting]["error"] for r in results.values() if setting in r]
    if not errors or len(errors) < len(results):
        return {setting: None}
    return {setting: {"mean_error": float(np.mean(errors)), "max_error": float(np.max(errors))}}


def bus_bandwidth(cost_model):
    """Predicted ring-allreduce bus bandwidth of the 8-GPU node presets vs nccl-tests."""
    from autodist.resource_spec import load_cluster

    out = {}
    for preset, reference in NCCL_BUSBW.items():
        spec = load_cluster(preset=preset)
        devices = [d.name for d in spec.gpus()]
        busbw = cost_model.comm_model(spec).bus_bandwidth(BUSBW_MESSAGE_BYTES, devices, "ring")
        out[preset] = {
            "gpus": len(devices),
            "message_bytes": BUSBW_MESSAGE_BYTES,
            "predicted_busbw": busbw,
            "nccl_tests_busbw": reference,
            "error": abs(busbw - reference) / reference,
        }
    return out


def _published_sections():
    """The sections that need nothing but the shipped data: name -> (evaluate, report lines)."""
    from cost_models.fitting import cluster_published, collectives_published, gpu_calibration

    return {"gpu_published": (gpu_calibration.evaluate, _gpu_lines),
            "collectives_published": (collectives_published.evaluate, collectives_published.report_lines),
            "cluster_published": (None, cluster_published.report_lines)}


SECTIONS = ("gpu_published", "collectives_published", "cluster_published")


def evaluate_section(name, allreduce=None, cluster_rows=None):
    """One of :data:`SECTIONS`, computed alone.  The ``cluster_published`` section needs ``allreduce``, what prices
    a job's Horovod step (cost_models.fitting.cluster_published.Pricer), and evaluates ``cluster_rows``
    (cost_models.fitting.cluster_published.select; default: every row)."""
    if name == "cluster_published":
        from cost_models.fitting import cluster_published

        if allreduce is None:
            raise CostModelError("the cluster_published section prices through the simulator: pass allreduce "
                                 "(placement.baselines.AllreducePricer)", field="allreduce")
        rows = cluster_published.select(cluster_rows) if cluster_rows is not None else cluster_published.EVALUATED
        return cluster_published.evaluate(allreduce, rows)
    return _published_sections()[name][0]()


def section_lines(name, section):
    """Human-readable lines of section ``name``."""
    return _published_sections()[name][1](section)


def evaluate(allreduce, data_dir=None, params=DEFAULT_PARAMS, cost_model=None, gpu_calibration=None,
             cluster_rows=None):
    """The whole evaluation as a JSON-ready dict (see the module docstring).

    ``allreduce``: what prices a job's Horovod step for the cluster section
    (placement.baselines.AllreducePricer, handed over by the caller: the
    simulator sits above cost_models); ``gpu_calibration``: the
    published-figures file to judge the GPU model on (default: the shipped
    one); ``cluster_rows``: the multi-GPU rows to judge the cluster pricing
    on (default: every row, see :func:`evaluate_section`).
    """
    from cost_models.fitting import gpu_calibration as gpu
    from cost_models.fitting.published import CALIBRATION_CSV, read_calibration

    timings_path = os.path.join(data_dir, os.path.basename(TIMINGS)) if data_dir else TIMINGS
    meta_path = os.path.join(data_dir, os.path.basename(TIMINGS_META)) if data_dir else TIMINGS_META
    if not os.path.exists(timings_path):
        raise CostModelError("no timing data; run `autodist profile ops` first", source=timings_path)
    timings = read_timings(timings_path)
    meta = read_meta(meta_path)
    steps = meta.get("steps", {})
    ops = op_holdout(timings, params)
    lomo = leave_one_model_out(timings, steps, params, profiled_cores(meta))
    busbw = bus_bandwidth(cost_model or CostModel.default())
    published = gpu.evaluate(read_calibration(gpu_calibration or CALIBRATION_CSV))
    report = {
        "params": dict(params),
        "data": {"file": timings_path, "rows": len(timings), "timed_rows": len(timings.timed()),
                 "command": meta.get("command", ""), "machine": meta.get("machine", {}), "note": meta.get("note", "")},
        "op_holdout": ops,
        "leave_one_model_out": lomo,
        "allreduce_busbw": busbw,
        "gpu_published": published,
        "collectives_published": evaluate_section("collectives_published"),
        "cluster_published": evaluate_section("cluster_published", allreduce, cluster_rows),
    }
    return report


def format_report(report):
    """Human-readable lines of :func:`evaluate`'s dict (ms, GB/s at the edge)."""
    ops, lomo = report["op_holdout"], report["leave_one_model_out"]
    lines = [
        f"data: {report['data']['timed_rows']} timed rows of {report['data']['rows']} ({report['data']['file']})",
        f"per-op MAPE, held-out ops >= 50 us ({ops['test_rows_at_least_50us']} rows): "
        f"learned {_pct(ops['mape'])}, roofline prior {_pct(ops['prior_mape'])}",
        f"  the same with one intra-op thread (the executor model's op widths, {ops['one_thread_rows_at_least_50us']} "
        f"rows): {_pct(ops['one_thread_mape'])}",
        "leave-one-zoo-model-out step time (op models, executor overhead and executor overlap fitted on the",
        "  other models), measured (median of the profiling runs) vs predicted; default executor: TensorFlow's,",
        "  ops overlap; one at a time: as profiled, predicted as the sum of the ops' times;",
        "  spread: how far the slowest run's measurement is above the fastest's:",
    ]
    settings = [s for s in ("default_executor", "one_op_at_a_time") if lomo[s]]
    for name, r in lomo["models"].items():
        cells = [f"{s.replace('_', ' ')} {e['measured_seconds'] * 1e3:8.1f} / {e['predicted_seconds'] * 1e3:8.1f} ms "
                 f"({e['signed_error'] * 100:+6.1f}%, spread {e['runs_spread'] * 100:4.1f}%)"
                 for s, e in ((s, r.get(s)) for s in settings) if e]
        lines.append(f"  {name:<16} " + "   ".join(cells))
    for s in settings:
        lines.append(f"  {s.replace('_', ' ')}: mean error {_pct(lomo[s]['mean_error'])}, "
                     f"max {_pct(lomo[s]['max_error'])}")
    if lomo.get("executor_on_measured_ops"):
        alone = lomo["executor_on_measured_ops"]
        lines.append("  executor model alone (each model's measured op times and widths through the schedule fitted")
        lines.append(f"  on the others) vs default executor: mean error {_pct(alone['mean_error'])}, "
                     f"max {_pct(alone['max_error'])}:")
        lines.append("    " + "  ".join(f"{name} {r['executor_on_measured_ops']['signed_error'] * 100:+.1f}%"
                                        for name, r in lomo["models"].items() if "executor_on_measured_ops" in r))
    lines.append("allreduce bus bandwidth, 8 GPUs, ring, 8 GiB message:")
    for preset, b in report["allreduce_busbw"].items():
        lines.append(
            f"  {preset:<9} predicted {b['predicted_busbw'] / 1e9:6.0f} GB/s  nccl-tests "
            f"{b['nccl_tests_busbw'] / 1e9:4.0f} GB/s  error {_pct(b['error'])}"
        )
    for name in SECTIONS:
        if name in report:
            lines += section_lines(name, report[name])
    return "\n".join(lines)


def _gpu_lines(published):
    """Lines of the ``gpu_published`` section."""
    summary = published["summary"]
    lines = [f"GPU kernel model vs published single-GPU throughput ({summary['evaluated']} of {summary['rows']} "
             "calibration figures evaluated); predicted: fitted on every row / without the row's model / prior:"]
    for r in published["rows"]:
        head = f"  {r['id']:<11} {r['model']:<11} {r['device']:<10} {r['precision']:<4} b{r['batch']:<4}"
        if "predicted" not in r:
            lines.append(f"{head} published {r['published']:9.1f}  {r['note']}")
            continue
        lines.append(f"{head} published {r['published']:9.1f}  predicted {r['predicted']:9.1f} "
                     f"({r['error'] * 100:+6.1f}%) / {r['predicted_left_out']:9.1f} ({r['error_left_out'] * 100:+6.1f}%)"
                     f" / {r['prior']:8.1f} ({r['error_prior'] * 100:+6.1f}%)  memory "
                     f"{r['peak_memory_bytes'] / 1e9:5.1f}/{r['memory_bytes'] / 1e9:.0f} GB")
    lines.append(f"  user path: {published['user_path']['how']}")
    lines.append(f"  left out: median |error| {_pct(summary['median_error_left_out'])} worst "
                 f"{_pct(summary['max_error_left_out'])}; prior alone: median "
                 f"{_pct(summary['median_error_prior'])}, worst {_pct(summary['max_error_prior'])}")
    for ratio in published["precision_ratios"]:
        lines.append(f"  AMP/FP32 {ratio['pair']}: published {ratio['published']:.2f}x, predicted "
                     f"{ratio['predicted']:.2f}x ({ratio['error'] * 100:+.1f}%)")
    lines.append(f"  every evaluated configuration fits its GPU: {'yes' if summary['all_fit_in_memory'] else 'NO'}")
    check = published["memory_check"]
    if check:
        lines.append(f"  {check['config']} at batch {check['batch']} on {check['device']}: "
                     f"{check['peak_memory_bytes'] / 1e9:.1f} GB, {'fits' if check['fits'] else 'does not fit'}")
    held_out = published["validation"]
    lines.append(f"held-out published figures (validation, never fitted), predicted by the fit on every "
                 f"calibration row: median |error| {_pct(held_out['median_error'])}, worst "
                 f"{_pct(held_out['max_error'])}")
    for r in held_out["rows"]:
        lines.append(f"  {r['id']:<14} {r['model']:<11} {r['device']:<10} {r['precision']:<4} b{r['batch']:<4} "
                     f"published {r['published']:9.1f}  predicted {r['predicted']:9.1f} ({r['error'] * 100:+6.1f}%)  "
                     f"memory {r['peak_memory_bytes'] / 1e9:5.1f}/{r['memory_bytes'] / 1e9:.0f} GB")
    return lines


def _pct(x):
    return "n/a" if x is None else f"{x * 100:.1f}%"
