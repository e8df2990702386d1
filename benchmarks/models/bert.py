"""BERT-style encoders (token and position embeddings, post-norm blocks, a classification
head) built from Keras layers and trained with model.fit (AdamW) on synthetic tokens."""

import keras

from synthetic import binary_labels, parse_args, tokens
from transformer_blocks import token_and_position_embedding, transformer_block

VOCAB = 30522


def build(name, layers, d_model, heads, d_ff, seq_len, gelu="erf"):
    ids = keras.Input((seq_len,), dtype="int32", name="input_ids")
    x = token_and_position_embedding(ids, VOCAB, seq_len, d_model)
    x = keras.layers.LayerNormalization(epsilon=1e-12, name="embed_norm")(x)
    for i in range(layers):
        x = transformer_block(x, heads, d_model, d_ff, dropout=0.1, name=f"layer_{i}", gelu=gelu)
    cls = keras.layers.Dense(d_model, activation="tanh", name="pooler")(x[:, 0])
    out = keras.layers.Dense(1, name="classifier", dtype="float32")(cls)
    return keras.Model(ids, out, name=name)


def train(name, layers, d_model, heads, d_ff, description, batch_size, seq_len=128):
    """Build the encoder and fit it for ``--steps`` steps of ``--seq-len`` tokens."""
    args = parse_args(description, batch_size=batch_size, seq_len=seq_len)
    keras.utils.set_random_seed(args.seed)
    n = args.steps * args.batch_size
    x, y = tokens(n, args.seq_len, VOCAB, args.seed), binary_labels(n, args.seed)
    model = build(name, layers, d_model, heads, d_ff, args.seq_len, args.gelu)
    compile_model(model)
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=2)


def compile_model(model, **options):
    """Compile as the zoo's encoders train: AdamW, binary cross-entropy on logits."""
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), loss=keras.losses.BinaryCrossentropy(from_logits=True),
                  **options)
