"""The project's accuracy targets for the cost model, and which of them an evaluation meets.

``autodist costmodel eval`` prints the figures; whether they are good
enough is the project's judgement, kept here with the benchmark that
records them (benchmarks/costmodel_eval.py).
"""

# Per-op MAPE on held-out ops; leave-one-zoo-model-out step error (default executor); predicted allreduce busbw
# against nccl-tests.
OPS = {"op_mape": 0.25, "step_error": 0.10, "busbw_error": 0.15}
# The GPU kernel model on the published single-GPU figures, left out by model; AMP over FP32 ratios.
GPU = {"median_error": 0.12, "max_error": 0.30, "ratio_error": 0.15}
# Allreduce busbw on the published nccl-tests rows, each system's efficiencies fitted on the other systems.
COLLECTIVES = {"busbw_error": 0.15}
# Multi-GPU throughput on the published scaling rows, left out by system; scaling efficiency in points.
CLUSTER = {"median_throughput_error": 0.15, "efficiency_points": 0.08}


def meets(evaluation):
    """Which targets ``evaluation`` (``costmodel eval --json``'s dict) meets: name -> bool."""
    ops, busbw, published = evaluation["op_holdout"], evaluation["allreduce_busbw"], evaluation["gpu_published"]
    step = step_target(evaluation["leave_one_model_out"])
    summary, scaling = published["summary"], evaluation["cluster_published"]["summary"]
    collectives = evaluation["collectives_published"]
    return {
        "op_mape": ops["mape"] is not None and ops["mape"] <= OPS["op_mape"],
        "step_error": step is not None and step["max_error"] <= OPS["step_error"],
        "busbw_error": all(b["error"] <= OPS["busbw_error"] for b in busbw.values()),
        "gpu_median_error": summary["median_error_left_out"] <= GPU["median_error"],
        "gpu_max_error": summary["max_error_left_out"] <= GPU["max_error"],
        "gpu_precision_ratio": all(abs(r["error"]) <= GPU["ratio_error"] for r in published["precision_ratios"]),
        "gpu_memory": summary["all_fit_in_memory"] and not (published["memory_check"] or {}).get("fits", True),
        "collectives_busbw": all(r["error"] <= COLLECTIVES["busbw_error"]
                                 for r in collectives["rows"] if r["fitted_on_other_systems"]),
        "cluster_throughput": scaling["median_throughput_error_left_out"] <= CLUSTER["median_throughput_error"],
        "cluster_efficiency": scaling["max_efficiency_points_left_out"] <= CLUSTER["efficiency_points"],
    }


def step_target(lomo):
    """The step summary the target is judged on: the default executor's, or one op at a time for data without it."""
    return lomo["default_executor"] or lomo["one_op_at_a_time"]


def target_lines(evaluation):
    """One line per target: its threshold and whether the evaluation meets it."""
    thresholds = {"op_mape": OPS["op_mape"], "step_error": OPS["step_error"], "busbw_error": OPS["busbw_error"],
                  "gpu_median_error": GPU["median_error"], "gpu_max_error": GPU["max_error"],
                  "gpu_precision_ratio": GPU["ratio_error"], "gpu_memory": None,
                  "collectives_busbw": COLLECTIVES["busbw_error"], "cluster_throughput": CLUSTER["median_throughput_error"],
                  "cluster_efficiency": CLUSTER["efficiency_points"]}
    return [f"target {name}{'' if bound is None else f' <= {bound:g}'}: {'met' if met else 'MISSED'}"
            for (name, met), bound in ((item, thresholds[item[0]]) for item in meets(evaluation).items())]
