"""How good are the cost models?  Held-out op error, step-level error, bus bandwidth.

- Per-op MAPE on a random 20% of the timed rows held out from fitting, for
  ops of at least 50 us (the learned model beside the roofline prior).
- Leave one zoo model out: fit on every other row, predict every op of the
  left-out model's step and compare the predicted compute time (the sum of
  predicted op times) with the step time measured when profiling.
- Predicted allreduce bus bandwidth of the 8-GPU H100 and A100 node presets
  against the nccl-tests figures of ../shared/reference/hardware.md.
"""

from __future__ import annotations

import os

import numpy as np

from autodist.errors import CostModelError
from cost_models.dataset import read_meta, read_timings
from cost_models.features import design_matrix
from cost_models.model import DEFAULT_PARAMS, TIMINGS, TIMINGS_META, CostModel
from cost_models.prior import prior_seconds

MIN_OP_SECONDS = 50e-6
HOLDOUT_FRACTION = 0.2
TARGETS = {"op_mape": 0.25, "step_error": 0.10, "busbw_error": 0.15}

# nccl-tests all_reduce_perf busbw, large messages, ring (hardware.md,
# "Collective measurements"): 8x H100 SXM ~370 GB/s; 8x A100 SXM ~200-208 GB/s.
NCCL_BUSBW = {"dgx-h100": 370e9, "dgx-a100": 204e9}
BUSBW_MESSAGE_BYTES = 8 * 2**30


def _fit(timed, params):
    from cost_models.op_model import OpTimeRegressor

    X = design_matrix(timed.raw, timed.peak_flops, timed.memory_bandwidth)
    return OpTimeRegressor(**params).fit(X, timed.seconds)


def _predict(model, rows):
    return model.predict(design_matrix(rows.raw, rows.peak_flops, rows.memory_bandwidth))


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
    """Per-op error on held-out rows (random split of the timed rows)."""
    timed = timings.timed()
    rng = np.random.default_rng(seed)
    test = rng.random(len(timed)) < HOLDOUT_FRACTION
    model = _fit(timed.subset(~test), params)
    held = timed.subset(test)
    big = held.seconds >= MIN_OP_SECONDS
    pred = _predict(model, held)
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
        "by_op_type": by_type,
    }


def fit_step_aggregate(kernel_sums, op_counts, step_seconds):
    """Fit ``step = overlap * sum(op seconds) + overhead * ops`` (relative least squares).

    On a multi-core CPU, TensorFlow runs independent ops at once (a step
    takes less than the sum of its kernels) and pays executor time per op;
    the two coefficients are learned from the measured steps of other models.

    Returns
    -------
    (overlap, overhead) : floats >= 0
    """
    k = np.asarray(kernel_sums, dtype=np.float64)
    n = np.asarray(op_counts, dtype=np.float64)
    t = np.asarray(step_seconds, dtype=np.float64)
    A = np.stack([k, n], axis=1) / t[:, None]
    from scipy.optimize import nnls

    coef, _ = nnls(A, np.ones_like(t))
    return float(coef[0]), float(coef[1])


def leave_one_model_out(timings, steps, params=DEFAULT_PARAMS):
    """Step-level error per zoo model, fitted without that model's rows.

    ``sum``: the sum of predicted times of every op of the model's step (ops
    that ran no kernel too: the predictor cannot know which ops TensorFlow
    folds away).  ``aggregate``: that sum put through
    :func:`fit_step_aggregate`, fitted on the other models' measured steps.
    """
    results = {}
    known = {name: r for name, r in steps.items() if (timings.origin == name).any()}
    for name, record in sorted(known.items()):
        mine = timings.origin == name
        rest = timings.subset(~mine).timed()
        others = [o for o in known if o != name]
        if len(rest) == 0 or len(others) < 2:
            continue
        model = _fit(rest, params)
        rows = timings.subset(mine)
        pred = _predict(model, rows)
        timed = np.isfinite(rows.seconds)
        overlap, overhead = fit_step_aggregate(
            [np.nansum(timings.seconds[timings.origin == o]) for o in others],
            [int((timings.origin == o).sum()) for o in others],
            [known[o]["step_seconds"] for o in others],
        )
        measured = float(record["step_seconds"])
        total = float(pred.sum())
        aggregate = overlap * total + overhead * len(rows)
        results[name] = {
            "measured_step_seconds": measured,
            "predicted_sum_seconds": total,
            "sum_error": (total - measured) / measured,
            "predicted_compute_seconds": aggregate,
            "error": abs(aggregate - measured) / measured,
            "signed_error": (aggregate - measured) / measured,
            "aggregate": {"overlap": overlap, "overhead_per_op_seconds": overhead},
            "ops": int(len(rows)),
            "timed_ops": int(timed.sum()),
            "measured_kernel_sum_seconds": float(rows.seconds[timed].sum()),
            "prior_sum_seconds": float(_prior(rows).sum()),
        }
    errors = [r["error"] for r in results.values()]
    return {"models": results, "mean_error": float(np.mean(errors)) if errors else None,
            "max_error": float(np.max(errors)) if errors else None}


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


def evaluate(data_dir=None, params=DEFAULT_PARAMS, cost_model=None):
    """The whole evaluation as a JSON-ready dict (see the module docstring)."""
    timings_path = os.path.join(data_dir, os.path.basename(TIMINGS)) if data_dir else TIMINGS
    meta_path = os.path.join(data_dir, os.path.basename(TIMINGS_META)) if data_dir else TIMINGS_META
    if not os.path.exists(timings_path):
        raise CostModelError("no timing data; run `autodist profile ops` first", source=timings_path)
    timings = read_timings(timings_path)
    meta = read_meta(meta_path)
    steps = meta.get("steps", {})
    ops = op_holdout(timings, params)
    lomo = leave_one_model_out(timings, steps, params)
    busbw = bus_bandwidth(cost_model or CostModel.default())
    return {
        "params": dict(params),
        "data": {"file": timings_path, "rows": len(timings), "timed_rows": len(timings.timed()),
                 "command": meta.get("command", ""), "machine": meta.get("machine", {}), "note": meta.get("note", "")},
        "targets": TARGETS,
        "op_holdout": ops,
        "leave_one_model_out": lomo,
        "allreduce_busbw": busbw,
        "meets": {
            "op_mape": ops["mape"] is not None and ops["mape"] <= TARGETS["op_mape"],
            "step_error": lomo["max_error"] is not None and lomo["max_error"] <= TARGETS["step_error"],
            "busbw_error": all(b["error"] <= TARGETS["busbw_error"] for b in busbw.values()),
        },
    }


def format_report(report):
    """Human-readable lines of :func:`evaluate`'s dict (ms, GB/s at the edge)."""
    ops, lomo = report["op_holdout"], report["leave_one_model_out"]
    lines = [
        f"data: {report['data']['timed_rows']} timed rows of {report['data']['rows']} ({report['data']['file']})",
        f"per-op MAPE, held-out ops >= 50 us ({ops['test_rows_at_least_50us']} rows): "
        f"learned {_pct(ops['mape'])}, roofline prior {_pct(ops['prior_mape'])} (target <= 25%)",
        "leave-one-zoo-model-out step time (predicted = overlap x sum of predicted op times + per-op overhead,",
        "  both coefficients fitted on the other models; raw sum error in brackets):",
    ]
    for name, r in lomo["models"].items():
        lines.append(
            f"  {name:<16} measured {r['measured_step_seconds'] * 1e3:9.1f} ms  predicted "
            f"{r['predicted_compute_seconds'] * 1e3:9.1f} ms  error {r['signed_error'] * 100:+6.1f}%  "
            f"(sum {r['sum_error'] * 100:+6.1f}%)"
        )
    lines.append(f"  mean error {_pct(lomo['mean_error'])}, max {_pct(lomo['max_error'])} (target <= 10%)")
    lines.append("allreduce bus bandwidth, 8 GPUs, ring, 8 GiB message:")
    for preset, b in report["allreduce_busbw"].items():
        lines.append(
            f"  {preset:<9} predicted {b['predicted_busbw'] / 1e9:6.0f} GB/s  nccl-tests "
            f"{b['nccl_tests_busbw'] / 1e9:4.0f} GB/s  error {_pct(b['error'])} (target <= 15%)"
        )
    return "\n".join(lines)


def _pct(x):
    return "n/a" if x is None else f"{x * 100:.1f}%"
