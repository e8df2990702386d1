"""Variables named as the model names them (Keras 3 ``variable.path``), on scripts written as users write them.

The scripts under tests/scripts/ reproduce constructs of public Keras and
TensorFlow examples: a subclassed model holding a Conv2D and two Dense
layers, a custom Layer holding a transformer block, a recommender with three
Embedding tables, and TensorFlow's canonical custom loop (subclassed model,
tf.data, GradientTape, apply_gradients).  In each, several ``tf.Variable``s
share one name (``net/kernel``), which merged them in the captured graph.
Each is captured (variables and parameters equal the model's own count),
planned, reported and run on two local replicas.
"""

import json
import os
import subprocess

import pytest

from autodist.cli import main

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")

# script -> (trainable variables, parameters): the model's own count, layer by layer.
EXPECTED = {
    # conv 3x3x1x4 + 4; dense (10*10*4)x16 + 16; dense 16x10 + 10
    "nested_subclassed": (6, 40 + 6416 + 170),
    "canonical_custom_loop": (6, 40 + 6416 + 170),
    # attention: 3 x (16x2x8 + 2x8) + 2x8x16 + 16; ffn 16x32+32, 32x16+16; two norms 2x16 each; head 16x2+2
    "transformer_block": (18, 3 * 272 + 272 + 544 + 528 + 64 + 34),
    # tables 100x8, 200x8, 20x8; score 16x1 + 1
    "embedding_tables": (5, 800 + 1600 + 160 + 17),
    # the head 32x1 + 1 only: the frozen base's weights are Keras' non-trainable ones (their tf.Variables say
    # trainable)
    "frozen_base": (2, 33),
}


def _script(name):
    return os.path.join(SCRIPTS, f"{name}.py")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_capture_names_every_variable_by_its_keras_path(name):
    from autodist.graph.capture import capture_script

    item = capture_script(_script(name))
    trainable = item.trainable_variables()
    names = [v.name for v in trainable]
    assert (len(trainable), item.parameter_count()) == EXPECTED[name]
    assert len(set(names)) == len(names)
    # a path names the layer (its last scope before the weight's own name differs between two kernels)
    kernels = [n for n in names if n.endswith("/kernel")]
    assert len({n.rpartition("/")[0] for n in kernels}) == len(kernels)


def test_raw_variables_sharing_a_name_are_refused_in_one_line(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(
        "import tensorflow as tf, keras\n"
        "a = tf.Variable(tf.ones([3]), name='w')\n"
        "b = tf.Variable(tf.ones([3]), name='w')\n"
        "opt = keras.optimizers.SGD(0.1)\n"
        "@tf.function\n"
        "def step(x):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_sum(a * x + b)\n"
        "    opt.apply_gradients(zip(tape.gradient(loss, [a, b]), [a, b]))\n"
        "step(tf.ones([3]))\n")
    with pytest.raises(SystemExit) as info:
        main(["capture", str(script), "-o", str(tmp_path / "g.json")])
    err = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(err) == 1
    assert "both named 'w'" in err[0] and "name=" in err[0]
    assert not (tmp_path / "g.json").exists()


@pytest.mark.parametrize("name", ["nested_subclassed", "canonical_custom_loop", "embedding_tables"])
def test_plan_report_and_two_replica_run_accept_the_model(name, tmp_path):
    plan = tmp_path / "plan.json"
    for argv in (["autodist", "capture", _script(name), "-o", str(tmp_path / "g.json")],
                 ["autodist", "plan", str(tmp_path / "g.json"), "--preset", "cpu-local:2", "--moves", "200",
                  "-o", str(plan)],
                 ["placement", "report", str(plan)],
                 ["autodist", "run", _script(name), "--plan", str(plan)]):
        done = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
    variables = json.loads(plan.read_text())["strategy"]["sync"]
    assert len(variables) == EXPECTED[name][0]
