"""Loops (While ops) are captured with their bodies and trip counts, and priced as trips x their body.

Real TensorFlow graphs: a Keras LSTM trained one step, and tf.while_loops.
"""

import numpy as np
import pytest

from autodist.graph.item import GraphItem
from autodist.graph.trace import capture_step
from autodist.resource_spec import from_preset
from cost_models.model import CostModel

BATCH, INPUT, HIDDEN = 16, 32, 64


def _lstm_step(steps):
    """A one-step training function of an LSTM over ``steps`` time steps, and its example arguments."""
    import keras
    import tensorflow as tf

    model = keras.Sequential([keras.Input((steps, INPUT)), keras.layers.LSTM(HIDDEN), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD()

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x) - y) ** 2)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    return step, np.zeros((BATCH, steps, INPUT), np.float32), np.zeros((BATCH, 1), np.float32)


@pytest.fixture(scope="module")
def lstm():
    return {steps: capture_step(*_lstm_step(steps)) for steps in (6, 12)}


def test_an_lstm_step_holds_its_forward_and_gradient_loops_with_the_sequence_length_as_trips(lstm):
    item = lstm[12]
    loops = list(item.loops.values())
    assert len(loops) == 2
    assert [item.ops[loop.op].phase for loop in loops] == ["forward", "backward"]
    assert all(loop.trips == 12 and loop.trips_known for loop in loops)
    products = [op for loop in loops for op in loop.ops if op.type == "MatMul"]
    assert len(products) == 6  # two in the forward body, four in its gradient
    assert all(op.flops > 0 for op in products)


def test_an_lstm_steps_flops_are_its_gate_products_forward_and_twice_backward(lstm):
    item = lstm[12]
    gates = 4 * (INPUT + HIDDEN) * HIDDEN * 2 * BATCH * 12
    products = sum(loop.trips * op.flops for loop in item.loops.values() for op in loop.ops if op.type == "MatMul")
    assert products == 3 * gates
    assert 3 * gates < item.total_flops() < 1.08 * 3 * gates  # with the gates' elementwise ops, the Dense, the loss
    assert GraphItem.from_dict(item.to_dict()) == item  # the loops survive the document


def test_a_loop_is_priced_by_its_trips(lstm):
    device = from_preset("cpu-local:1").devices()[0]
    model = CostModel.default()
    seconds = {}
    for steps, item in lstm.items():
        costs = model.op_costs(item, device)
        seconds[steps] = [costs[name].seconds for name in item.loops]
    for short, long in zip(seconds[6], seconds[12]):
        assert long == pytest.approx(2 * short, rel=0.05)
        assert short > 100e-6  # six iterations of a body of ~100 ops: far above one launch


def test_a_while_loop_bounded_by_its_condition_has_a_static_trip_count():
    import tensorflow as tf

    def step(x):
        return tf.while_loop(lambda i, v: i < 10, lambda i, v: (i + 1, tf.matmul(v, v)), (tf.constant(0), x))[1]

    item = capture_step(step, tf.TensorSpec([8, 8]))
    (loop,) = item.loops.values()
    assert (loop.trips, loop.trips_known) == (10, True)
    assert [op.flops for op in loop.ops if op.type == "MatMul"] == [2 * 8 * 8 * 8]
    assert item.ops[loop.op].flops == 10 * sum(op.flops for op in loop.ops)  # the product and the counters


def test_autographs_range_loop_and_a_stepped_python_while_have_static_trip_counts():
    import tensorflow as tf

    def over_range(x):
        for _ in tf.range(5):
            x = tf.matmul(x, x)
        return x

    def stepped(x):
        i = tf.constant(0)
        while i <= 7:
            x = tf.matmul(x, x)
            i += 2
        return x

    for step, trips in ((over_range, 5), (stepped, 4)):
        (loop,) = capture_step(step, tf.TensorSpec([8, 8])).loops.values()
        assert (loop.trips, loop.trips_known) == (trips, True)


def test_a_loop_of_unknown_trips_is_priced_once_and_the_report_warns_naming_it():
    import keras
    import tensorflow as tf

    from autodist.api import make_plan
    from autodist.report.document import build_report
    from autodist.report.render import render

    dense = keras.layers.Dense(4)
    dense.build((None, 4))
    optimizer = keras.optimizers.SGD()

    def step(x, n):
        with tf.GradientTape() as tape:
            loop = tf.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, dense(v)), (tf.constant(0), x))
            loss = tf.reduce_sum(loop[1])
        optimizer.apply_gradients(zip(tape.gradient(loss, dense.trainable_variables), dense.trainable_variables))
        return loss

    item = capture_step(step, tf.TensorSpec([8, 4]), tf.TensorSpec([], tf.int32))
    unknown = item.unknown_trips()
    assert unknown and all(not item.loops[name].trips_known and item.loops[name].trips == 1 for name in unknown)
    text = render(build_report(make_plan(item, "cpu-local:1", moves=20), item))
    assert f"Warning: the trip count of loop {unknown[0]} is not known" in text


def test_a_document_whose_loop_names_no_loop_op_is_refused(lstm):
    from autodist.errors import InputError

    data = lstm[6].to_dict()
    data["loops"][0]["op"] = data["ops"][0]["name"]
    with pytest.raises(InputError, match=r"loops\[0\]\.op"):
        GraphItem.from_dict(data)


def test_a_nested_loop_is_priced_per_iteration_of_its_outer_loop():
    import tensorflow as tf

    def step(x):
        def outer(i, v):
            inner = tf.while_loop(lambda j, w: j < 4, lambda j, w: (j + 1, tf.matmul(w, w)), (tf.constant(0), v))
            return i + 1, inner[1]

        return tf.while_loop(lambda i, v: i < 3, outer, (tf.constant(0), x))[1]

    item = capture_step(step, tf.TensorSpec([8, 8]))
    (loop,) = item.loops.values()
    (inner,) = loop.loops
    assert (loop.trips, inner.trips) == (3, 4)
    product = 2 * 8 * 8 * 8
    assert [op.flops for op in inner.ops if op.type == "MatMul"] == [product]
    assert 3 * 4 * product <= item.ops[loop.op].flops <= 3 * 4 * product * 1.02  # the counters' adds beside


def test_a_loop_at_another_batch_scales_its_batch_major_tensors_not_its_trips(lstm):
    from autodist.graph.rebatch import at_batch

    item = lstm[12]
    doubled = at_batch(item, 2 * BATCH)

    def products(graph):
        return sorted(loop.trips * op.flops for loop in graph.loops.values() for op in loop.ops if op.type == "MatMul")

    assert [loop.trips for loop in doubled.loops.values()] == [12, 12]
    assert products(doubled) == [2 * p for p in products(item)]  # every gate product and its gradients: batch-linear
    forward = next(iter(item.loops))
    assert doubled.ops[forward].flops == pytest.approx(2 * item.ops[forward].flops, rel=0.01)
    kept = list(zip(item.ops[forward].output_bytes, doubled.ops[forward].output_bytes))
    assert all(new in (old, 2 * old) for old, new in kept)  # kept activations double, kept weight reads do not
    assert sum(new == 2 * old > 0 for old, new in kept) >= 6


def test_the_forward_loop_holds_the_activations_it_keeps_for_its_gradient(lstm):
    item = lstm[12]
    forward = item.ops[next(iter(item.loops))]
    state = BATCH * HIDDEN * 4  # one float32 [batch, hidden] tensor
    assert sum(forward.output_bytes) >= 12 * 6 * state  # gates, cell and hidden states of every step


def test_inspect_lists_each_loop_with_its_trips(lstm):
    from autodist.graph.summary import render, summarize

    lines = [line for line in render(summarize(lstm[6])) if line.startswith("loop ")]
    assert len(lines) == 2 and all("6 trips of" in line for line in lines)


def test_profile_loop_iterations_measures_a_calibration_the_cost_model_reads(tmp_path):
    import subprocess
    import sys

    from cost_models.loop_iteration import LoopIterationCalibration
    from cost_models.model import load_cost_model

    refused = subprocess.run([sys.executable, "-m", "autodist", "profile", "loop-iterations", "--runs", "2",
                              "--out", str(tmp_path)], capture_output=True, text=True)
    assert refused.returncode == 2 and "--runs" in refused.stderr and not list(tmp_path.iterdir())
    done = subprocess.run([sys.executable, "-m", "autodist", "profile", "loop-iterations", "--runs", "3",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    calibration = LoopIterationCalibration.load(str(tmp_path / "loop_iteration_calibration.json"))
    assert [m["variables"] for m in calibration.measurements] == [3, 13, 23]  # the counter and 2, 12, 22 tensors
    assert "--runs 3" in calibration.command
    assert load_cost_model(str(tmp_path)).loop_iteration == calibration
