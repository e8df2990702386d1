"""Train a keras.applications image model (weights=None) on synthetic images."""

import keras

from synthetic import images, parse_args


def train(application, image_size, description, batch_size, classes=1000):
    """Build ``keras.applications.<application>`` (``--fused-batch-norm``: see fused_bn) and fit it for ``--steps``
    steps."""
    args = parse_args(description, batch_size=batch_size, batch_norm=True)
    keras.utils.set_random_seed(args.seed)
    shape = (image_size, image_size, 3)
    x, y = images(args.steps * args.batch_size, shape, classes, seed=args.seed)
    model = getattr(keras.applications, application)(weights=None, input_shape=shape, classes=classes)
    if args.fused_batch_norm:
        from fused_bn import with_fused_batch_norm

        model = with_fused_batch_norm(model)
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(),
    )
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=2)
