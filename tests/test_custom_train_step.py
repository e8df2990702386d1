"""A model that overrides ``train_step`` (keras_io_wgan_gp in the corpus: a critic updated three times a step, a
gradient penalty differentiated twice, two optimizers set in an overridden ``compile``): Keras' fit runs the model's
own step, so only plans on which every replica runs Keras' fit (allreduce every variable) run it.  Before, placement
offered PS and hybrid plans, and the one-client loop that runs them rebuilds Keras' own step: the WGAN's run stopped
on its unlabelled ``fit(x)``, and a labelled model with its own step would have trained Keras' step instead."""

import pytest

BATCH = 8


def _critic_and_generator():
    import keras

    critic = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(1)],
                              name="critic")
    generator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(6)], name="generator")
    return critic, generator


def _wgan_class():
    import keras
    import tensorflow as tf

    class Wgan(keras.Model):
        """The corpus' construct, small: critic steps in a Python loop, a nested tape, a generator step."""

        def __init__(self, critic, generator):
            super().__init__()
            self.critic, self.generator = critic, generator

        def compile(self, c_optimizer, g_optimizer):
            super().compile()
            self.c_optimizer, self.g_optimizer = c_optimizer, g_optimizer

        def train_step(self, real):
            n = tf.shape(real)[0]
            for _ in range(2):
                with tf.GradientTape() as tape:
                    fake = self.generator(tf.random.normal((n, 4)), training=True)
                    alpha = tf.random.uniform((n, 1))
                    mixed = real + alpha * (fake - real)
                    with tf.GradientTape() as inner:
                        inner.watch(mixed)
                        score = self.critic(mixed, training=True)
                    slope = tf.norm(inner.gradient(score, mixed), axis=1)
                    loss = (tf.reduce_mean(self.critic(fake, training=True))
                            - tf.reduce_mean(self.critic(real, training=True)) + tf.reduce_mean((slope - 1.0) ** 2))
                grads = tape.gradient(loss, self.critic.trainable_variables)
                self.c_optimizer.apply_gradients(zip(grads, self.critic.trainable_variables))
            with tf.GradientTape() as tape:
                g_loss = -tf.reduce_mean(self.critic(self.generator(tf.random.normal((n, 4)), training=True)))
            grads = tape.gradient(g_loss, self.generator.trainable_variables)
            self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_variables))
            return {"loss": loss, "g_loss": g_loss}

    return Wgan


def _compiled_wgan():
    import keras

    model = _wgan_class()(*_critic_and_generator())
    model.compile(keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3))
    return model


@pytest.fixture(scope="module")
def wgan():
    """The compiled model and its captured step."""
    import numpy as np

    from autodist.loops.fit import step_item

    model = _compiled_wgan()
    x = np.random.default_rng(0).normal(size=(4 * BATCH, 6)).astype("float32")
    return model, step_item(model, x, None, BATCH, None, "wgan", "test_custom_train_step.py")


@pytest.fixture(scope="module")
def wgan_job(wgan):
    return wgan[1]


def test_a_model_s_own_train_step_is_named_and_keras_own_is_not(wgan_job):
    import keras

    from autodist.loops.fit import custom_train_step

    assert wgan_job.job.custom_train_step.endswith("_wgan_class.<locals>.Wgan")
    assert "overrides train_step" in wgan_job.job.why_collective_only()
    plain = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    assert custom_train_step(plain) == "" and custom_train_step(keras.Model(plain.inputs, plain.outputs)) == ""


def test_placement_offers_only_plans_whose_replicas_run_keras_fit(wgan_job):
    from autodist.api import plan_with_search

    plan, search = plan_with_search(wgan_job, "cpu-local:2", moves=60)
    assert plan.strategy.allreduces_everything()
    assert "overrides train_step" in search.stats["left_out"]


def test_the_one_client_loop_refuses_a_model_s_own_train_step():
    from autodist.errors import LaunchError
    from launcher.runtime.layout import RunLayout, VariablePlacement
    from launcher.runtime.trainer import PlacedTrainer

    model = _compiled_wgan()
    cpu = "/job:localhost/replica:0/task:0/device:CPU:0"
    variables = {w.path: VariablePlacement(w.path, "ps", (cpu,), axis=0) for w in model.trainable_weights}
    with pytest.raises(LaunchError, match="overrides train_step.*--allreduce-only"):
        PlacedTrainer(model, RunLayout((cpu, cpu), ("n0", "n1"), variables, predicted_step_time=1e-3))


def test_the_critic_s_two_updates_a_step_are_counted_and_the_report_warns(wgan, tmp_path, capsys):
    """The critic's optimizer applies twice a step, the generator's once: a run sums the critic's gradients twice; the
    simulator prices one sum, and the report says so."""
    import json

    import jsonschema

    from autodist.report import schema
    from autodist.cli import placement_main

    model, job = wgan
    assert job.job.updates_per_step == {w.path: 2 for w in model.critic.trainable_weights}
    assert set(job.job.updates_per_step) < {v.name for v in job.trainable_variables()}
    graph = tmp_path / "graph.json"
    job.save(graph)
    outputs = []
    for extra in ([], ["--format", "json"]):
        with pytest.raises(SystemExit) as done:
            placement_main(["report", str(graph), "--preset", "cpu-local:2", "--moves", "20", *extra])
        outputs.append(capsys.readouterr().out)
        assert done.value.code == 0
    text, doc = " ".join(outputs[0].split()), json.loads(outputs[1])
    jsonschema.validate(doc, schema())
    assert doc["job"]["updates_per_step"] == {w.path: 2 for w in model.critic.trainable_weights}
    assert "Warning: the step's optimizers update 4 variables 2 times a step" in text


def test_a_custom_loop_s_updates_are_counted_from_the_trace_its_first_call_made(tmp_path):
    """A tf.function step's first call is traced by the training-step hook (to see it applies gradients); capture's
    trace of the same call is then TensorFlow's cached one, which applies nothing anew."""
    import textwrap

    from autodist.graph.capture import capture_script

    path = tmp_path / "loop.py"
    path.write_text(textwrap.dedent("""
        import numpy as np, tensorflow as tf
        model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2, name="d")])
        optimizer = tf.keras.optimizers.SGD(0.1)

        @tf.function
        def step(x):
            for _ in range(3):
                with tf.GradientTape() as tape:
                    loss = tf.reduce_mean(model(x, training=True) ** 2)
                optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                              model.trainable_variables))
            return loss

        step(np.ones((4, 3), np.float32))
        """))
    item = capture_script(str(path))
    names = {v.name for v in item.trainable_variables()}
    assert sorted(n.rsplit("/", 1)[1] for n in names) == ["bias", "kernel"]  # Keras numbers the model's scope
    assert item.job.updates_per_step == dict.fromkeys(names, 3)
