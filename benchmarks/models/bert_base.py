"""A BERT-base-sized encoder (12 layers, d=768, 12 heads, seq 128) with a classification
head, built from Keras layers, trained with model.fit (AdamW) on synthetic tokens."""

import keras

from synthetic import binary_labels, parse_args, tokens
from transformer_blocks import token_and_position_embedding, transformer_block

VOCAB, SEQ, LAYERS, D_MODEL, HEADS, D_FF = 30522, 128, 12, 768, 12, 3072


def build():
    ids = keras.Input((SEQ,), dtype="int32", name="input_ids")
    x = token_and_position_embedding(ids, VOCAB, SEQ, D_MODEL)
    x = keras.layers.LayerNormalization(epsilon=1e-12, name="embed_norm")(x)
    for i in range(LAYERS):
        x = transformer_block(x, HEADS, D_MODEL, D_FF, dropout=0.1, name=f"layer_{i}")
    cls = keras.layers.Dense(D_MODEL, activation="tanh", name="pooler")(x[:, 0])
    out = keras.layers.Dense(1, name="classifier")(cls)
    return keras.Model(ids, out, name="bert_base")


def main():
    args = parse_args(__doc__, batch_size=4)
    keras.utils.set_random_seed(args.seed)
    n = args.steps * args.batch_size
    x, y = tokens(n, SEQ, VOCAB, args.seed), binary_labels(n, args.seed)
    model = build()
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), loss=keras.losses.BinaryCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=2)


if __name__ == "__main__":
    main()
