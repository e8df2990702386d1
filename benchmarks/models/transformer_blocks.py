"""Transformer encoder/decoder blocks built from Keras layers (shared by the zoo's BERT and LM)."""

import keras


def transformer_block(x, heads, d_model, d_ff, dropout, causal=False, name="block", gelu="erf"):
    """Post-norm block: self-attention, then a two-layer feed-forward, each with a residual.

    ``gelu`` is the feed-forward activation: "erf" (exact) or "tanh" (its approximation)."""
    attn = keras.layers.MultiHeadAttention(heads, d_model // heads, dropout=dropout, name=f"{name}_attention")
    y = attn(x, x, use_causal_mask=causal)
    x = keras.layers.LayerNormalization(epsilon=1e-12, name=f"{name}_attention_norm")(x + y)
    activation = "gelu" if gelu == "erf" else (lambda v: keras.activations.gelu(v, approximate=True))
    y = keras.layers.Dense(d_ff, activation=activation, name=f"{name}_ff_in")(x)
    y = keras.layers.Dense(d_model, name=f"{name}_ff_out")(y)
    y = keras.layers.Dropout(dropout)(y)
    return keras.layers.LayerNormalization(epsilon=1e-12, name=f"{name}_ff_norm")(x + y)


def token_and_position_embedding(ids, vocab, seq_len, d_model, name="embed"):
    """Token embedding plus a learned position embedding."""
    tok = keras.layers.Embedding(vocab, d_model, name=f"{name}_tokens")(ids)
    positions = keras.ops.arange(seq_len)
    pos = keras.layers.Embedding(seq_len, d_model, name=f"{name}_positions")(positions)
    return tok + pos
