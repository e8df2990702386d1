"""Step time with ops one at a time (as profiled) against TensorFlow's default executor.

`autodist profile ops` runs graph ops one at a time (one inter-op thread) so
that kernel times are the ops' own and add up to the step.  This measures
what that costs in step time: every zoo model of the shipped timing data, at
its profiled batch size, is timed in fresh processes under both settings
(Grappler fusion off, as when profiling), alternating the settings over
rounds so that the machine's drift touches both.

    python benchmarks/executor_threads.py [--rounds 2] [--steps 10]

Writes benchmarks/results/executor_threads.json.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "benchmarks"))

from autodist.io import write_json_atomic  # noqa: E402
from cost_models.dataset import read_meta  # noqa: E402
from cost_models.model import TIMINGS_META  # noqa: E402
from zoo import machine  # noqa: E402

SETTINGS = ("default", "one_op_at_a_time")

# Runs in a fresh process: build the zoo step, warm up, time the steps, print the median.
_CHILD = """
import json, statistics, sys
setting, steps, script, args = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
from cost_models.profiling import one_op_at_a_time, step_wall_times, unfused_graphs, zoo_step
if setting == "one_op_at_a_time":
    one_op_at_a_time()
with unfused_graphs():
    fn, fn_args, _ = zoo_step(script, args)
    step_wall_times(fn, fn_args, 2)  # warm-up: tracing and first allocations
    print(json.dumps(statistics.median(step_wall_times(fn, fn_args, steps))))
"""


def step_seconds(setting, script, args, steps):
    done = subprocess.run([sys.executable, "-c", _CHILD, setting, str(steps), script, *args],
                          capture_output=True, text=True, cwd=REPO, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{script} ({setting}) failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results", "executor_threads.json"))
    args = parser.parse_args(argv)
    models = read_meta(TIMINGS_META)["steps"]
    rows = {}
    for name, record in models.items():
        script = os.path.join(REPO, "benchmarks", "models", f"{name}.py")
        times = {s: [] for s in SETTINGS}
        for r in range(args.rounds):
            for setting in SETTINGS if r % 2 == 0 else reversed(SETTINGS):
                times[setting].append(step_seconds(setting, script, record.get("args", []), args.steps))
        default, one = (statistics.median(times[s]) for s in SETTINGS)
        rows[name] = {"args": record.get("args", []), "default_seconds": default, "one_op_at_a_time_seconds": one,
                      "ratio": one / default, "per_round": times}
        print(f"{name:16s} default {default * 1e3:8.1f} ms  one op at a time {one * 1e3:8.1f} ms  "
              f"ratio {one / default:.3f}")
    ratios = [r["ratio"] for r in rows.values()]
    result = {
        "command": "python " + " ".join(shlex.quote(a) for a in [os.path.relpath(__file__, REPO)] + sys.argv[1:]),
        "machine": machine(),
        "models": rows,
        "max_abs_change": max(abs(r - 1) for r in ratios),
        "mean_ratio": statistics.mean(ratios),
    }
    write_json_atomic(args.out, result)
    print(f"largest change {result['max_abs_change'] * 100:.1f}%, mean ratio {result['mean_ratio']:.3f} -> {args.out}")


if __name__ == "__main__":
    main()
