"""tf.data input under `autodist run`: benchmarks/models/tfdata_mlp.py feeds model.fit from a generator or from
TFRecord files it writes, and trains to the same weights as plain Keras on arrays.

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
    assert f"step {STEPS + 1}" not in out
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
@pytest.mark.parametrize("kind, source", [("allreduce", "tfrecord"), ("allreduce", "generator"), ("ps", "tfrecord"),
                                          ("hybrid", "generator")])
def test_tfdata_scripts_train_under_every_plan_kind_to_single_process_weights(plans, reference_weights, tmp_path,
                                                                              kind, source):
    from launcher.local import run_local

    plan, plan_path = plans[kind]
    weights = tmp_path / "weights.npz"
    run_local(plan, plan_path, SCRIPT, ["--input", source, "--steps", str(STEPS), "--batch-size", str(BATCH),
                                        "--save-weights", str(weights)])
    _assert_same_weights(dict(np.load(weights)), reference_weights)
