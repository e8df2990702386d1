"""A small CNN image classifier (two 3x3 convolutions, 32x32x3 images, 0.3M parameters) trained with model.fit."""

import keras

from synthetic import images, parse_args


def main():
    args = parse_args(__doc__, batch_size=64, steps=5)
    keras.utils.set_random_seed(args.seed)
    x, y = images(args.steps * args.batch_size, (32, 32, 3), classes=10, seed=args.seed)
    model = keras.Sequential(
        [
            keras.Input((32, 32, 3)),
            keras.layers.Conv2D(32, 3, activation="relu", name="conv_0"),
            keras.layers.MaxPooling2D(name="pool_0"),
            keras.layers.Conv2D(64, 3, activation="relu", name="conv_1"),
            keras.layers.MaxPooling2D(name="pool_1"),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu", name="dense"),
            keras.layers.Dense(10, name="logits"),
        ],
        name="small_cnn",
    )
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=2)


if __name__ == "__main__":
    main()
