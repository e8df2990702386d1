"""A wide MLP whose gradients are tens of MiB (48 MiB in float32) and whose step computes little: a step that the
allreduce dominates, for comparing allreduce algorithms on emulated links."""

import keras

from mlp import train
from synthetic import parse_args


def main():
    train(parse_args(__doc__, batch_size=32, steps=12), 1024, (4096, 2048), "wide_mlp", keras.optimizers.SGD(1e-2),
          shuffle=False)


if __name__ == "__main__":
    main()
