"""Train a keras.applications image model (weights=None) on synthetic images."""

import keras

from synthetic import images, parse_args


def train(application, image_size, description, batch_size, classes=1000):
    """Build ``keras.applications.<application>`` (``--fused-batch-norm``: see fused_bn) and fit it for ``--steps``
    steps."""
    args = parse_args(description, batch_size=batch_size, batch_norm=True)
    keras.utils.set_random_seed(args.seed)
    x, y = images(args.steps * args.batch_size, (image_size, image_size, 3), classes, seed=args.seed)
    model = build(application, image_size, classes)
    if args.fused_batch_norm:
        from fused_bn import with_fused_batch_norm

        model = with_fused_batch_norm(model)
    compile_model(model)
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=2)


def build(application, image_size, classes=1000):
    """``keras.applications.<application>`` with random weights for square ``image_size`` images."""
    return getattr(keras.applications, application)(weights=None, input_shape=(image_size, image_size, 3),
                                                    classes=classes)


def compile_model(model, **options):
    """Compile as every zoo image model trains: SGD with momentum, sparse cross-entropy."""
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(), **options)
