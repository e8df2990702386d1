"""Evaluate the cost models on the shipped data; compare the two gradient-boosting estimators.

Per-op MAPE on held-out rows (ops >= 50 us), leave-one-zoo-model-out step
error, and the predicted allreduce bus bandwidth of the 8-GPU H100/A100
presets against nccl-tests.  Writes benchmarks/results/costmodel_eval.json.

    python benchmarks/costmodel_eval.py [--out PATH]
"""

import argparse
import os
import shlex
import sys
import time

from autodist.io import write_json_atomic
from cost_models.calibration import machine_description
from cost_models.evaluation import evaluate, format_report
from cost_models.model import DEFAULT_PARAMS

HERE = os.path.dirname(os.path.abspath(__file__))
CANDIDATES = {
    "hist": dict(DEFAULT_PARAMS, estimator="hist"),
    "gbr": dict(DEFAULT_PARAMS, estimator="gbr", max_iter=300),
}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(HERE, "results", "costmodel_eval.json"))
    args = parser.parse_args(argv)
    reports = {}
    for name, params in CANDIDATES.items():
        start = time.perf_counter()
        reports[name] = evaluate(params=params)
        reports[name]["evaluation_seconds"] = time.perf_counter() - start
        print(f"== estimator {name}")
        print(format_report(reports[name]))
    result = {
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__)] + sys.argv[1:]),
        "machine": machine_description(),
        "default_estimator": DEFAULT_PARAMS["estimator"],
        "estimators": reports,
    }
    write_json_atomic(args.out, result)
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
