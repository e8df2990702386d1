"""The registry of training-loop kinds (autodist.loops.KINDS) is what capture and the runtime dispatch on.

Every kind has its core module (hook, capture, probe) and a runtime side in
launcher.runtime.loops under the same name; each kind's construct, in a tiny
real script, is captured by that kind and by no other: taken out of the
registry, the construct is no longer captured (or no longer made one replica).
"""

import os
import textwrap

import pytest

from autodist import loops
from autodist.errors import CaptureError, LaunchError

from tests.conftest import REPO

SCRIPTS = os.path.join(REPO, "tests", "scripts")

_MODEL = """
import numpy as np
import tensorflow as tf
import keras

x = np.random.default_rng(0).random((32, 4), dtype=np.float32)
y = np.random.default_rng(1).random((32, 1), dtype=np.float32)
"""

# kind name -> (a script of that kind's construct, what capture records as the step's loop)
CONSTRUCTS = {
    "fit": (_MODEL + """
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=8, epochs=1, verbose=0)
""", "fit"),
    "function": (_MODEL + """
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
opt = keras.optimizers.SGD(0.1)

@tf.function
def step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xb) - yb))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss

for start in range(0, 32, 8):
    step(x[start:start + 8], y[start:start + 8])
""", "function"),
    # a strategy.run loop: its step is the function kind's, the strategy made one replica by the strategy kind
    "strategy": (_MODEL + """
strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.1)

def replica_step(xb, yb):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(xb) - yb))
    opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
    return loss

@tf.function
def step(xb, yb):
    return strategy.reduce("SUM", strategy.run(replica_step, args=(xb, yb)), axis=None)

for start in range(0, 32, 8):
    step(x[start:start + 8], y[start:start + 8])
""", "function"),
}


def test_every_kind_has_its_core_module_and_a_runtime_side_under_the_same_name():
    from launcher.runtime.loops import SIDES

    names = [kind.NAME for kind in loops.KINDS]
    assert len(set(names)) == len(names) and set(names) == set(SIDES) == set(CONSTRUCTS)
    for kind in loops.KINDS:
        assert all(callable(getattr(kind, part)) for part in ("hook", "capturing", "probing")), kind.NAME
        assert all(callable(getattr(SIDES[kind.NAME], part)) for part in ("replica", "one_client")), kind.NAME


def _capture(tmp_path, name):
    from autodist.graph.script import capture_script

    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(CONSTRUCTS[name][0]))
    return capture_script(str(script), timeout_s=120)


@pytest.mark.parametrize("name", sorted(CONSTRUCTS))
def test_each_kind_s_construct_is_captured_through_the_registry_and_by_that_kind_only(name, tmp_path, capsys,
                                                                                       monkeypatch):
    item = _capture(tmp_path, name)
    assert item.job.step == CONSTRUCTS[name][1]
    one_replica = "runs as one replica" in capsys.readouterr().out
    assert one_replica == (name == "strategy")

    monkeypatch.setattr(loops, "KINDS", tuple(k for k in loops.KINDS if k.NAME != name))
    if name == "strategy":  # captured or not, the script's own strategy now runs as it would
        try:
            _capture(tmp_path, name)
        except CaptureError:
            pass
        assert "runs as one replica" not in capsys.readouterr().out
    else:
        with pytest.raises(CaptureError, match="script finished without training"):
            _capture(tmp_path, name)


def test_an_overridden_train_step_is_the_fit_kind():
    from autodist.graph.script import capture_script

    assert capture_script(os.path.join(SCRIPTS, "custom_train_step.py")).job.step == "fit"


def test_the_profiling_probe_grabs_each_kind_s_step_through_the_registry(tmp_path):
    import numpy as np

    from cost_models.profiling.ops import zoo_step

    for name in ("fit", "function"):
        script = tmp_path / f"{name}.py"
        script.write_text(textwrap.dedent(CONSTRUCTS[name][0]))
        fn, args, _ = zoo_step(str(script))
        out = fn(*args)  # the grabbed step runs, as profiling runs it
        assert np.isfinite(float(out["loss"] if isinstance(out, dict) else out)), name


def test_the_single_client_installs_every_registered_kind_s_side(tmp_path, monkeypatch):
    import keras
    import tensorflow as tf

    from launcher.runtime.loops import OneClient, one_client

    script = tmp_path / "function.py"
    script.write_text(textwrap.dedent(CONSTRUCTS["function"][0]))
    client = OneClient(layout=None, plan_path="plan.json", report_path=None, not_collective="it splits a replica")
    with one_client(client) as sides:
        assert set(sides) == {kind.NAME for kind in loops.KINDS}
        assert "fit" in vars(keras.Model)  # routed to the plan's client
        assert type(tf.distribute.MirroredStrategy()) is type(tf.distribute.get_strategy())
        with pytest.raises(LaunchError, match="custom training loops run only .* it splits a replica"):
            exec(compile(script.read_text(), str(script), "exec"), {})
    monkeypatch.setattr(loops, "KINDS", tuple(k for k in loops.KINDS if k.NAME != "function"))
    with one_client(client) as sides:
        assert "function" not in sides
        exec(compile(script.read_text(), str(script), "exec"), {})  # trains as written: no kind claims its step
    assert "fit" not in vars(keras.Model)
