"""A small MLP classifier trained with model.fit (the README's example)."""

import keras

from synthetic import parse_args, images


def main():
    args = parse_args(__doc__, batch_size=64, steps=5)
    keras.utils.set_random_seed(args.seed)
    x, y = images(args.steps * args.batch_size, (784,), classes=10, seed=args.seed)
    model = keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(10),
        ],
        name="mlp",
    )
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=2)


if __name__ == "__main__":
    main()
