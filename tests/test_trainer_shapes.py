"""The one-client trainer allreduces gradients whose static shape is unknown."""

import numpy as np

LOCAL_CPU = "/job:localhost/replica:0/task:0/device:CPU:0"


def test_a_gradient_of_unknown_static_shape_is_allreduced_across_replica_devices():
    """keras-io's ViT cuts images into patches with a reshape to sizes computed from ``ops.shape``; once its epoch's
    last, smaller batch retraces the step with the batch dimension unknown, the Dense kernels after the patches get
    gradients of static shape ``[None, units]``, and the ring, which cut the flattened gradients by their static
    length, failed with "int() argument must be ... not 'NoneType'"."""
    import keras

    from launcher.runtime.layout import RunLayout, VariablePlacement
    from launcher.runtime.trainer import PlacedTrainer

    class Patches(keras.layers.Layer):
        def call(self, images):
            shape = keras.ops.shape(images)
            return keras.ops.reshape(images, (shape[0], (shape[1] // 2) * (shape[2] // 2), 4 * shape[3]))

    inputs = keras.Input((4, 4, 1))
    patches = keras.layers.Dense(3)(Patches()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(patches)))
    model.compile(optimizer="sgd", loss="mse")
    variables = {w.path: VariablePlacement(w.path, "allreduce", (LOCAL_CPU, LOCAL_CPU), bucket=0)
                 for w in model.trainable_weights}
    layout = RunLayout((LOCAL_CPU, LOCAL_CPU), ("n0", "n1"), variables, predicted_step_time=1e-3, plan_name="t")
    rng = np.random.default_rng(0)
    trainer = PlacedTrainer(model, layout)
    for rows in (4, 2):  # an epoch's last, smaller batch retraces the step with the batch dimension unknown
        loss = trainer.step(rng.random((rows, 4, 4, 1), dtype=np.float32), rng.random((rows, 1), dtype=np.float32))
        assert np.isfinite(float(loss))
