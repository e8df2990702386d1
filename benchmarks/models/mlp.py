"""A small MLP classifier trained with model.fit (the README's example)."""

import keras

from synthetic import parse_args, images


def train(args, inputs, hidden, name, optimizer, **fit_options):
    """Fit a classifier of ReLU Dense layers of widths ``hidden`` over ``inputs`` features (10 logits) on random
    images, as ``args`` (batch size, steps, seed) say."""
    keras.utils.set_random_seed(args.seed)
    x, y = images(args.steps * args.batch_size, (inputs,), classes=10, seed=args.seed)
    model = keras.Sequential([keras.Input((inputs,)), *(keras.layers.Dense(w, activation="relu") for w in hidden),
                              keras.layers.Dense(10)], name=name)
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=2, **fit_options)


def main():
    train(parse_args(__doc__, batch_size=64, steps=5), 784, (512, 256), "mlp", keras.optimizers.Adam(1e-3))


if __name__ == "__main__":
    main()
