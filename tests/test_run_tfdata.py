"""Input under `autodist run`: benchmarks/models/tfdata_mlp.py feeds model.fit from a generator or from TFRecord
files it writes, and trains to the same weights as plain Keras on arrays; a global batch other than the plan's is
refused, or re-planned with --replan.

The plans are those of tests/test_run.py (made from the same model's captured step); the runs start real
TensorFlow processes on localhost.  The in-process tests run the one-client runtime on this process's CPU.
"""

import os
import re

import numpy as np
import pytest

from tests.conftest import ZOO
from tests.test_run import BATCH, STEPS, _fit_under_plan, plans, reference_weights, small_job  # noqa: F401

SCRIPT = os.path.join(ZOO, "tfdata_mlp.py")


def _assert_same_weights(trained, reference):
    assert sorted(trained) == sorted(reference)
    for name, expected in reference.items():
        np.testing.assert_allclose(trained[name], expected, rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("source", ["tfrecord", "generator"])
def test_datasets_train_under_a_one_client_plan_like_plain_keras(source, reference_weights, tmp_path):
    from run_small_mlp import build_model, make_data, trained_weights
    from tfdata_mlp import generator_dataset, tfrecord_dataset, write_tfrecords

    x, y = make_data(STEPS, BATCH, seed=0)
    if source == "tfrecord":
        dataset = tfrecord_dataset(write_tfrecords(x, y, str(tmp_path), 3), BATCH)
    else:
        dataset = generator_dataset(x, y, BATCH)
    model = build_model(0)
    out = _fit_under_plan(model, dataset, None)
    # TFRecord files do not say how many batches they hold: the steps are counted without a total.
    assert re.search(rf"^step {STEPS}(/{STEPS})?  loss [\d.]+  step [\d.]+ ms  \d+ samples/s", out, re.M), out
    assert not re.search(rf"^step {STEPS + 1}\b", out, re.M)
    _assert_same_weights(trained_weights(model), reference_weights)


def test_a_dataset_with_sample_weights_or_a_separate_y_is_refused():
    import tensorflow as tf
    from run_small_mlp import build_model, make_data

    from autodist.errors import LaunchError

    x, y = make_data(1, BATCH, seed=0)
    weighted = tf.data.Dataset.from_tensor_slices((x, y, np.ones(len(y), np.float32))).batch(BATCH)
    with pytest.raises(LaunchError, match=r"dataset of \(x, y\) batches"):
        _fit_under_plan(build_model(0), weighted, None)
    with pytest.raises(LaunchError, match="a dataset holds its own targets"):
        _fit_under_plan(build_model(0), tf.data.Dataset.from_tensor_slices(x).batch(BATCH), y)


@pytest.mark.slow
# Each input under one of the two runtimes: collective ops (allreduce plans) and one client (PS and hybrid plans,
# whose every kind tests/test_run.py trains).
@pytest.mark.parametrize("kind, source", [("allreduce", "generator"), ("ps", "tfrecord")])
def test_tfdata_scripts_train_under_both_runtimes_to_single_process_weights(plans, reference_weights, tmp_path,
                                                                            kind, source):
    from launcher.local import run_local

    plan, plan_path = plans[kind]
    weights = tmp_path / "weights.npz"
    run_local(plan, plan_path, SCRIPT, ["--input", source, "--steps", str(STEPS), "--batch-size", str(BATCH),
                                        "--save-weights", str(weights)])
    _assert_same_weights(dict(np.load(weights)), reference_weights)


def test_a_global_batch_other_than_the_plans_is_refused_before_training():
    import dataclasses

    from run_small_mlp import build_model, make_data

    from autodist.errors import LaunchError
    from launcher.runtime.fit import PlacedFit
    from tests.test_run import _local_hybrid_layout

    x, y = make_data(2, BATCH, seed=0)
    model = build_model(0)
    before = [w.numpy() for w in model.trainable_weights]
    layout = dataclasses.replace(_local_hybrid_layout(model), batch_size=2 * BATCH)
    with PlacedFit(layout, "plan.json"), pytest.raises(LaunchError) as info:
        model.fit(x, y, batch_size=BATCH)
    assert str(info.value) == (f"batch size: the script's global batch is {BATCH} samples and the plan was made for "
                               f"{2 * BATCH}; plan again with this batch (autodist run --replan), or give the script "
                               "the plan's batch size")
    assert all(np.array_equal(a, w.numpy()) for a, w in zip(before, model.trainable_weights))


@pytest.mark.slow
def test_run_refuses_a_batch_the_plan_was_not_made_for_and_replans_when_asked(plans, tmp_path):
    import subprocess
    import sys

    _, plan_path = plans["allreduce"]
    base = [sys.executable, "-m", "autodist", "run", os.path.join(ZOO, "run_small_mlp.py"), "--plan", plan_path]
    args = ["--", "--steps", "2", "--batch-size", str(BATCH // 2)]
    refused = subprocess.run(base + args, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-2000:]
    assert f"global batch is {BATCH // 2} samples and the plan was made for {BATCH}" in refused.stderr
    assert "step 1" not in refused.stdout
    replanned = subprocess.run(base + ["--replan", "--budget", "1", "-o", "replanned.json"] + args,
                               capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert replanned.returncode == 0, replanned.stderr[-2000:]
    assert f"the script's batch is {BATCH // 2} and {plan_path} was made for {BATCH}: planning again" in replanned.stdout
    assert "step 2/2" in replanned.stdout and replanned.stdout.rstrip().endswith("/replanned.json")
