"""A small GPT-style Transformer language model (4 layers, d=256, seq 128) trained with a
custom loop whose step is an @autodist.function."""

import keras
import tensorflow as tf

import autodist
from synthetic import parse_args, tokens
from transformer_blocks import token_and_position_embedding, transformer_block

VOCAB, SEQ, LAYERS, D_MODEL, HEADS, D_FF = 8000, 128, 4, 256, 4, 1024


def build():
    ids = keras.Input((SEQ,), dtype="int32")
    x = token_and_position_embedding(ids, VOCAB, SEQ, D_MODEL)
    for i in range(LAYERS):
        x = transformer_block(x, HEADS, D_MODEL, D_FF, dropout=0.0, causal=True, name=f"layer_{i}")
    logits = keras.layers.Dense(VOCAB, name="lm_head")(x)
    return keras.Model(ids, logits, name="transformer_lm")


def main():
    args = parse_args(__doc__, batch_size=8, steps=3)
    keras.utils.set_random_seed(args.seed)
    data = tokens(args.steps * args.batch_size, SEQ + 1, VOCAB, args.seed)
    model = build()
    optimizer = keras.optimizers.Adam(3e-4)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @autodist.function
    def train_step(inputs, targets):
        with tf.GradientTape() as tape:
            loss = loss_fn(targets, model(inputs, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for step in range(args.steps):
        batch = data[step * args.batch_size : (step + 1) * args.batch_size]
        loss = train_step(batch[:, :-1], batch[:, 1:])
        print(f"step {step}: loss {float(loss):.4f}")


if __name__ == "__main__":
    main()
