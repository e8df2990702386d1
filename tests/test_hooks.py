"""autodist.hooks: hooks exist only inside their block, are removed however it ends, and importing patches nothing."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from autodist import hooks

from tests.conftest import REPO, ZOO


class _Base:
    def greet(self):
        return "base"


class _Owner(_Base):
    def own(self):
        return "own"


def test_patched_restores_an_owned_attribute_and_removes_an_inherited_one_also_after_an_error():
    with pytest.raises(RuntimeError):
        with hooks.patched(_Owner, "own", lambda self: "hooked") as original:
            assert _Owner().own() == "hooked" and original(_Owner()) == "own"
            raise RuntimeError("the block fails")
    assert _Owner().own() == "own"
    with hooks.patched(_Owner, "greet", lambda self: "hooked") as original:
        assert _Owner().greet() == "hooked" and original(_Owner()) == "base"
    assert "greet" not in vars(_Owner) and _Owner().greet() == "base"


def test_keras_fit_goes_to_the_handler_inside_and_to_keras_after():
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    seen = []
    with hooks.keras_fit(lambda m, x, y, **kw: seen.append((m, x.shape, kw))) as keras_fit:
        model.fit(np.ones((4, 2)), np.ones((4, 1)), epochs=2)
    assert seen == [(model, (4, 2), {"epochs": 2})]
    assert keras_fit is keras.Model.fit and "fit" not in vars(keras.Model)
    assert len(model.fit(np.ones((4, 2)), np.ones((4, 1)), verbose=0).history["loss"]) == 1


def test_training_steps_routes_only_tf_functions_that_apply_gradients():
    import keras
    import tensorflow as tf

    w = tf.Variable([1.0, 2.0])
    opt = keras.optimizers.SGD(0.5)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * x)
        opt.apply_gradients([(tape.gradient(loss, w), w)])
        return loss

    @tf.function
    def scale(x):
        return 3.0 * x

    calls = []
    with hooks.training_steps(lambda fn, args, kwargs: calls.append((fn, args)) or "routed"):
        assert step(tf.constant([1.0, 1.0])) == "routed"
        assert float(tf.reduce_sum(scale(tf.constant([1.0, 1.0])))) == 6.0
        assert hooks.step_handler() is not None
    assert [fn for fn, _ in calls] == [step]
    assert hooks.step_handler() is None
    np.testing.assert_allclose(w.numpy(), [1.0, 2.0])  # checking the step traced it, ran nothing
    step(tf.constant([1.0, 1.0]))  # outside: the step itself runs
    np.testing.assert_allclose(w.numpy(), [0.5, 1.5])


def test_run_script_swaps_argv_and_path_and_restores_them(tmp_path):
    script = tmp_path / "show.py"
    out = tmp_path / "out.txt"
    script.write_text(f"import sys\nopen({str(out)!r}, 'w').write(repr((sys.argv, sys.path[0])))\n")
    argv, path = sys.argv[:], sys.path[:]
    hooks.run_script(str(script), ["--steps", 3])
    assert eval(out.read_text()) == ([str(script), "--steps", "3"], str(tmp_path))
    assert (sys.argv, sys.path) == (argv, path)
    script.write_text("raise ValueError('bad')\n")
    with pytest.raises(ValueError):
        hooks.run_script(str(script))
    assert (sys.argv, sys.path) == (argv, path)


def test_importing_autodist_capture_profiling_and_the_runtime_patches_nothing():
    code = textwrap.dedent("""
        import keras, tensorflow as tf
        from keras.src.optimizers.base_optimizer import BaseOptimizer
        before = (dict(vars(keras.Model)), BaseOptimizer.apply, type(tf.function(lambda: None)).__call__)
        import autodist, autodist.hooks, autodist.loops, autodist.graph.capture, autodist.api, cost_models.profiling.ops
        import launcher.runtime.client, launcher.runtime.worker, launcher.runtime.fit, launcher.runtime.trainer
        import launcher.runtime.loops
        after = (dict(vars(keras.Model)), BaseOptimizer.apply, type(tf.function(lambda: None)).__call__)
        print(before == after)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.stdout.strip().splitlines()[-1] == "True", done.stderr[-2000:]


def test_profiling_grabs_a_plain_tf_function_step_and_leaves_nothing_hooked():
    import keras
    import tensorflow as tf

    from cost_models.profiling.ops import zoo_step

    step, args, name = zoo_step(os.path.join(ZOO, "custom_loop.py"), ["--batch-size", "8"])
    assert name == "custom_loop" and [tuple(a.shape) for a in args] == [(8, 16), (8, 1)]
    assert np.isfinite(float(step(*args)))  # the grabbed step runs, as profiling runs it
    assert "fit" not in vars(keras.Model) and hooks.step_handler() is None
    assert type(tf.function(lambda: None)).__call__.__module__.startswith("tensorflow")
