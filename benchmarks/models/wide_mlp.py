"""A wide MLP whose gradients are tens of MiB (48 MiB in float32) and whose step computes little: a step that the
allreduce dominates, for comparing allreduce algorithms on emulated links."""

import keras

from synthetic import parse_args, images


def main():
    args = parse_args(__doc__, batch_size=32, steps=12)
    keras.utils.set_random_seed(args.seed)
    x, y = images(args.steps * args.batch_size, (1024,), classes=10, seed=args.seed)
    model = keras.Sequential(
        [
            keras.Input((1024,)),
            keras.layers.Dense(4096, activation="relu"),
            keras.layers.Dense(2048, activation="relu"),
            keras.layers.Dense(10),
        ],
        name="wide_mlp",
    )
    model.compile(
        optimizer=keras.optimizers.SGD(1e-2),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    model.fit(x, y, batch_size=args.batch_size, epochs=1, shuffle=False, verbose=2)


if __name__ == "__main__":
    main()
