"""The measured step time `autodist run` prints leaves out steps that traced the step again.

An epoch whose last batch is smaller runs the step at another shape: TensorFlow
traces it again there, and that step's time is mostly the trace, not the step
the plan priced.  keras-io's ViT under `autodist run` printed "median of
steps 2-2", a step of 18.9 s against 9.4 s predicted: its last, smaller batch.
"""

import io
import re

import numpy as np

LOCAL_CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def _fit_closing_line(rows, batch_size, epochs):
    """The closing line of a one-client fit of ``rows`` samples under a plan of two replicas on this CPU."""
    import keras

    from launcher.runtime.fit import PlacedFit
    from launcher.runtime.layout import RunLayout, VariablePlacement

    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    variables = {w.path: VariablePlacement(w.path, "allreduce", (LOCAL_CPU, LOCAL_CPU), bucket=0)
                 for w in model.trainable_weights}
    layout = RunLayout((LOCAL_CPU, LOCAL_CPU), ("n0", "n1"), variables, predicted_step_time=1e-3, plan_name="t")
    x = np.random.default_rng(0).normal(size=(rows, 8)).astype("float32")
    out = io.StringIO()
    with PlacedFit(layout, "plan.json", out=out):
        model.fit(x, x.sum(axis=1, keepdims=True), batch_size=batch_size, epochs=epochs, verbose=0)
    (line,) = [line for line in out.getvalue().splitlines() if "measured step time" in line]
    return line


def test_an_epochs_smaller_last_batch_is_left_out_of_the_measured_step():
    # 100 rows in batches of 32: steps 4 and 8 run 4 rows; step 4 traces the step again (with the batch dimension
    # unknown, so step 8 does not).
    line = _fit_closing_line(100, 32, 2)
    assert "(median of steps 2-8, less step 4, which traced the step again)" in line, line


def test_a_run_whose_only_later_step_traced_again_says_it_measured_a_trace():
    line = _fit_closing_line(36, 32, 1)  # step 1 of 32 rows (left out: it traces), step 2 of 4 rows traces again
    assert re.search(r"\(median of steps 2-2; each traced the step again \(another batch shape\): a trace, not a "
                     r"measure of the step\)", line), line


def test_steps_of_one_batch_shape_are_all_measured():
    assert "(median of steps 2-6) vs predicted" in _fit_closing_line(96, 16, 1)
