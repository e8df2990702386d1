"""A wide-and-deep recommender: 8 categorical columns hashed into a shared 1M-row embedding
(deep part) plus a 1M-row linear weight (wide part; ``--rows`` for another size), trained with
model.fit and Adagrad, which keeps the embedding updates sparse."""

import keras

from synthetic import binary_labels, ids, parse_args

ROWS, COLUMNS, DIM = 1_000_000, 8, 32


def build(rows=ROWS):
    features = keras.Input((COLUMNS,), dtype="int32", name="categorical_ids")
    deep = keras.layers.Embedding(rows, DIM, name="deep_embedding")(features)
    deep = keras.layers.Flatten()(deep)
    for i, width in enumerate((256, 128, 64)):
        deep = keras.layers.Dense(width, activation="relu", name=f"deep_{i}")(deep)
    wide = keras.layers.Embedding(rows, 1, name="wide_weights")(features)
    wide = keras.layers.Flatten()(wide)
    wide = keras.ops.sum(wide, axis=1, keepdims=True)
    logit = keras.layers.Add()([keras.layers.Dense(1, name="deep_out")(deep), wide])
    return keras.Model(features, logit, name="wide_deep")


def main():
    args = parse_args(__doc__, batch_size=256, rows=ROWS)
    keras.utils.set_random_seed(args.seed)
    n = args.steps * args.batch_size
    x, y = ids(n, COLUMNS, args.rows, args.seed), binary_labels(n, args.seed)
    model = build(args.rows)
    model.compile(optimizer=keras.optimizers.Adagrad(0.05), loss=keras.losses.BinaryCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=2)


if __name__ == "__main__":
    main()
