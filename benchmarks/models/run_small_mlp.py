"""A small MLP (with an Embedding input branch) trained by model.fit; the `autodist run` example and test job.

Runs the same as a plain script (`python run_small_mlp.py`) and under
`autodist run`; `--save-weights FILE` writes the trained weights (.npz, keyed
by variable path) so the two can be compared.  The ids of one batch are distinct: Keras' Adam
squares each slice of a sparse gradient separately, so for an id repeated in a
batch its update differs from the dense update the runtime applies.
"""

import argparse
import os

import keras
import numpy as np

import autodist

VOCAB = 64


def build_model(seed):
    """The compiled model; layers are named so variable names do not depend on what the process built before."""
    keras.utils.set_random_seed(seed)
    ids = keras.Input((4,), dtype="int32", name="ids")
    embedded = keras.layers.GlobalAveragePooling1D()(keras.layers.Embedding(VOCAB, 8, name="embedding")(ids))
    hidden = keras.layers.Dense(32, activation="relu", name="hidden")(embedded)
    model = keras.Model(ids, keras.layers.Dense(4, name="logits")(hidden), name="small_mlp")
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def make_data(steps, batch_size, seed, last_batch=0):
    """Integer ids (distinct within each batch) and class labels for ``steps`` batches, then a partial batch of
    ``last_batch`` samples."""
    per_batch = batch_size * 4
    if per_batch > VOCAB:
        raise ValueError(f"batch size above {VOCAB // 4} would repeat ids in a batch")
    if not 0 <= last_batch < batch_size:
        raise ValueError("the last batch must hold fewer samples than --batch-size")
    rng = np.random.default_rng(seed)
    sizes = [batch_size] * steps + ([last_batch] if last_batch else [])
    x = np.concatenate([rng.permutation(VOCAB)[:4 * n] for n in sizes]).reshape(sum(sizes), 4)
    y = rng.integers(0, 4, size=(sum(sizes),), dtype=np.int32)
    return x.astype(np.int32), y


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--last-batch", type=int, default=0,
                        help="end the data with a partial batch of this many samples (after --steps full ones)")
    parser.add_argument("--save-weights", help="write the trained weights to this .npz file")
    parser.add_argument("--checkpoint", help="resume from these weights (.weights.h5) when the file exists, "
                        "and save them there after every epoch (model.fit's ModelCheckpoint)")
    parser.add_argument("--custom-loop", action="store_true",
                        help="train with a custom loop whose step is an @autodist.function instead of model.fit")
    parser.add_argument("--tf-function-loop", action="store_true",
                        help="train with a custom loop whose step is a plain @tf.function (found without autodist)")
    args = parser.parse_args()
    try:
        x, y = make_data(args.steps, args.batch_size, args.seed, args.last_batch)
    except ValueError as exc:
        parser.error(str(exc))
    model = build_model(args.seed)
    callbacks = []
    if args.checkpoint:
        if os.path.exists(args.checkpoint):
            model.load_weights(args.checkpoint)
        callbacks.append(keras.callbacks.ModelCheckpoint(args.checkpoint, save_weights_only=True))
    if args.custom_loop or args.tf_function_loop:
        import tensorflow as tf

        train_custom_loop(model, x, y, args.batch_size, autodist.function if args.custom_loop else tf.function)
    else:
        model.fit(x, y, batch_size=args.batch_size, epochs=1, shuffle=False, verbose=2, callbacks=callbacks)
    if args.save_weights and autodist.is_chief():
        np.savez(args.save_weights, **trained_weights(model))


def make_train_step(model):
    """One training step of ``model`` as a plain function of a batch (forward, gradients, optimizer update)."""
    import tensorflow as tf

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=xb, y=yb, y_pred=model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return train_step


def train_custom_loop(model, x, y, batch_size, decorator):
    """The same training as ``model.fit(..., shuffle=False)``, one epoch, written as a custom loop.

    ``decorator`` makes the step: ``autodist.function`` or ``tf.function``.
    """
    train_step = decorator(make_train_step(model))
    for start in range(0, len(x), batch_size):
        loss = train_step(x[start:start + batch_size], y[start:start + batch_size])
        print(f"step {start // batch_size + 1}: loss {float(loss):.4f}")


def trained_weights(model):
    """Variable path -> value of every trainable weight."""
    return {w.path: w.numpy() for w in model.trainable_weights}


if __name__ == "__main__":
    main()
