"""Measure the zoo's own Keras models training on a lent GPU, through Keras 3's JAX backend (XLA).

The device machines carry JAX but no TensorFlow (a TensorFlow GPU wheel is far
over what a call may carry).  Keras 3 runs the same model definitions on
either backend, and its JAX trainer always compiles the step with XLA, as
Keras compiles a default ``model.compile`` on a TensorFlow GPU
(``jit_compile="auto"``).  So this times the zoo's models (built by
``benchmarks/models``, compiled as the zoo compiles them) as XLA runs them on
the GPU: the nearest measurement of what autodist prices that this machine
allows.  Validation only: nothing is fitted on it.

Run on the device machine (Keras and its two missing dependencies carried as
wheels):  python3 benchmarks/device/keras_jax_steps.py --out $OUT/keras_jax_steps.json

Each configuration runs in its own process (so that its peak memory is its
own): two ``model.fit`` steps build and compile the step, then Keras' own
compiled train function is called on one device-resident batch, warm-up
steps first, then the median of the timed steps, each waited for.

``--profile N``: then N more steps run under JAX's profiler, and the GPU's
kernels are summed by name on each line of the device's trace (a CUDA
stream's), with the stats of each name's first event (XLA's op, the
kernel's launch shape): where the step's time goes, kernel by kernel.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "models")

# name: (zoo model, batch, Keras dtype policy); most important first.
CONFIGS = {
    "resnet50-fp32-b256": ("resnet50", 256, "float32"),
    "resnet50-mixed-b256": ("resnet50", 256, "mixed_float16"),
    "bert_base-mixed-b64": ("bert_base", 64, "mixed_float16"),
    "bert_base-fp32-b32": ("bert_base", 32, "float32"),
    "vgg16-fp32-b128": ("vgg16", 128, "float32"),
    "inception_v3-fp32-b128": ("inception_v3", 128, "float32"),
}
IMAGE_MODELS = {"resnet50": ("ResNet50", 224), "vgg16": ("VGG16", 224), "inception_v3": ("InceptionV3", 299)}
SEQ_LEN = 128


def _model_and_batch(model_name, batch, np):
    """The zoo's model, compiled as the zoo compiles it, and one synthetic batch."""
    sys.path.insert(0, MODELS)
    rng = np.random.default_rng(0)
    if model_name in IMAGE_MODELS:
        import keras_app

        application, size = IMAGE_MODELS[model_name]
        model = keras_app.build(application, size)
        keras_app.compile_model(model, jit_compile=True)
        data = (rng.random((batch, size, size, 3), dtype=np.float32), rng.integers(0, 1000, (batch,), dtype=np.int32))
    else:
        import bert

        model = bert.build(model_name, 12, 768, 12, 3072, SEQ_LEN)
        bert.compile_model(model, jit_compile=True)
        data = (rng.integers(0, bert.VOCAB, (batch, SEQ_LEN), dtype=np.int32),
                rng.integers(0, 2, (batch, 1)).astype(np.float32))
    return model, data


TOP_NAMES = 400  # per trace line, by total time


def _event_stats(event):
    return {str(k): (v if isinstance(v, (int, float)) else str(v)[:200]) for k, v in event.stats}


def kernel_profile(run_steps, steps):
    """Device trace lines of ``steps`` calls of ``run_steps``: per line, each event name's count, total
    nanoseconds and first event's stats (the largest :data:`TOP_NAMES`), and the device's busy span."""
    import tempfile

    import jax

    with tempfile.TemporaryDirectory() as where:
        with jax.profiler.trace(where):
            run_steps(steps)
        (path,) = [os.path.join(d, f) for d, _, files in os.walk(where) for f in files if f.endswith(".xplane.pb")]
        with open(path, "rb") as f:
            data = jax.profiler.ProfileData.from_serialized_xspace(f.read())
    lines = {}
    for plane in data.planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            names, first, last = {}, None, None
            for event in line.events:
                count, total, stats = names.get(event.name, (0, 0.0, None))
                names[event.name] = (count + 1, total + event.duration_ns, stats or _event_stats(event))
                first = event.start_ns if first is None else min(first, event.start_ns)
                last = max(last or 0.0, event.start_ns + event.duration_ns)
            top = sorted(names.items(), key=lambda item: -item[1][1])[:TOP_NAMES]
            lines[f"{plane.name} | {line.name}"] = {
                "events": sum(c for c, _, _ in names.values()), "busy_ns": sum(t for _, t, _ in names.values()),
                "span_ns": (last - first) if names else 0.0,
                "names": [{"name": n, "count": c, "total_ns": t, "stats": st} for n, (c, t, st) in top]}
    return {"steps": steps, "lines": lines}


def measure_one(name, warmup, timed, profile=0):
    """Median step seconds and peak device bytes of one configuration (run in its own process)."""
    import jax
    import keras
    import numpy as np

    model_name, batch, policy = CONFIGS[name]
    keras.mixed_precision.set_global_policy(policy)
    model, data = _model_and_batch(model_name, batch, np)
    model.fit(*(np.concatenate([part, part]) for part in data), batch_size=batch, epochs=1, verbose=0)
    state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True, optimizer_variables=True,
                                 metrics_variables=True, purge_model_variables=False)
    batch_on_device = jax.device_put(data)
    seconds = []
    for i in range(warmup + timed):
        start = time.perf_counter()
        logs, state = model.train_function(state, iter([batch_on_device]))
        jax.block_until_ready((logs, state))
        if i >= warmup:
            seconds.append(time.perf_counter() - start)
    step = statistics.median(seconds)
    device = jax.devices()[0]
    profiled = {}
    if profile:
        def run_steps(n):
            nonlocal state
            for _ in range(n):
                logs, state = model.train_function(state, iter([batch_on_device]))
            jax.block_until_ready(state)

        profiled = {"profile": kernel_profile(run_steps, profile)}
    return {"config": name, "model": model_name, "batch": batch, "policy": policy,
            "median_step_s": step, "samples_per_s": batch / step, "min_step_s": min(seconds),
            "max_step_s": max(seconds), "timed_steps": timed, "warmup_steps": warmup,
            "peak_bytes": (device.memory_stats() or {}).get("peak_bytes_in_use"), "device": device.device_kind,
            "jax": jax.__version__, "keras": keras.__version__, "params": model.count_params(),
            "loss": float(logs["loss"]), **profiled}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="JSON file for every configuration's figures")
    parser.add_argument("--only", action="append", choices=sorted(CONFIGS), help="configurations to run (all)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--timed", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=240, help="seconds one configuration may take")
    parser.add_argument("--profile", type=int, default=0, help="steps to trace after the timed ones (0: none)")
    parser.add_argument("--one", choices=sorted(CONFIGS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one, args.warmup, args.timed, args.profile)))
        return
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_PYTHON_CLIENT_PREALLOCATE="false")
    results = []
    for name in args.only or CONFIGS:
        command = [sys.executable, __file__, "--one", name, "--warmup", str(args.warmup), "--timed", str(args.timed),
                   "--profile", str(args.profile)]
        started = time.time()
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
            figures = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {
                "config": name, "error": done.stderr.strip().splitlines()[-3:]}
        except subprocess.TimeoutExpired:
            figures = {"config": name, "error": f"over {args.timeout:.0f} s"}
        figures["wall_s"] = round(time.time() - started, 1)
        print(json.dumps({k: v for k, v in figures.items() if k != "profile"}), flush=True)
        results.append(figures)
        if args.out:
            with open(args.out + ".tmp", "w") as f:
                json.dump(results, f, indent=1)
            os.replace(args.out + ".tmp", args.out)


if __name__ == "__main__":
    main()
