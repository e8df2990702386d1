"""A model that overrides ``train_step`` and is fit without targets (keras.io's VAE, GAN examples).

Keras hands ``train_step`` the batch ``x`` itself when there are no
targets; capture traced it with ``(x,)``, and the script's step failed with
"tracing the step failed: ValueError: in user code:", its cause cut.  Now
it is captured, and a step that really fails to trace says where and why.
"""

import os

import pytest

from autodist.errors import CaptureError

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "custom_train_step.py")


def test_overridden_train_step_fit_without_targets_is_captured():
    from autodist.graph.capture import capture_script

    item = capture_script(SCRIPT)
    # encoder 16x8+8, 8x2+2; decoder 2x8+8, 8x16+16
    assert (len(item.trainable_variables()), item.parameter_count()) == (8, 136 + 18 + 24 + 144)
    assert item.job.input_shapes == {"x": [16, 16]} and item.job.batch_size == 16


def test_a_train_step_that_fails_to_trace_names_its_line_and_cause(tmp_path):
    from autodist.graph.capture import capture_script

    script = tmp_path / "train.py"
    lines = open(SCRIPT).read().replace("data - self(data)", "data - tf.reshape(self(data), [4, -1, 3])")
    script.write_text(lines)
    with pytest.raises(CaptureError) as info:
        capture_script(str(script))
    message = str(info.value)
    assert len(message.splitlines()) == 1
    assert f"at {script}:24: ValueError" in message and "Reshape" in message
