"""ResNeXt-101 32x4d (Xie et al. 2017: blocks 3-4-23-3, 32 groups of width 4 doubling per
stage) built from Keras layers, on synthetic ImageNet-sized images, model.fit (SGD)."""

import keras

from synthetic import images, parse_args

BLOCKS = (3, 4, 23, 3)
GROUPS, GROUP_WIDTH = 32, 4


def bottleneck(x, width, out_channels, stride, name):
    """1x1 reduce, 3x3 grouped conv, 1x1 expand, each with batch norm; projection shortcut when shapes change."""
    shortcut = x
    if stride != 1 or x.shape[-1] != out_channels:
        shortcut = keras.layers.Conv2D(out_channels, 1, strides=stride, use_bias=False, name=f"{name}_proj")(x)
        shortcut = keras.layers.BatchNormalization(name=f"{name}_proj_bn")(shortcut)
    y = keras.layers.Conv2D(width, 1, use_bias=False, name=f"{name}_reduce")(x)
    y = keras.layers.ReLU()(keras.layers.BatchNormalization(name=f"{name}_reduce_bn")(y))
    y = keras.layers.Conv2D(width, 3, strides=stride, padding="same", groups=GROUPS, use_bias=False,
                            name=f"{name}_grouped")(y)
    y = keras.layers.ReLU()(keras.layers.BatchNormalization(name=f"{name}_grouped_bn")(y))
    y = keras.layers.Conv2D(out_channels, 1, use_bias=False, name=f"{name}_expand")(y)
    y = keras.layers.BatchNormalization(name=f"{name}_expand_bn")(y)
    return keras.layers.ReLU()(y + shortcut)


def build(classes=1000):
    inputs = keras.Input((224, 224, 3))
    x = keras.layers.Conv2D(64, 7, strides=2, padding="same", use_bias=False, name="stem")(inputs)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization(name="stem_bn")(x))
    x = keras.layers.MaxPooling2D(3, strides=2, padding="same")(x)
    for stage, blocks in enumerate(BLOCKS):
        width = GROUPS * GROUP_WIDTH * 2**stage
        for b in range(blocks):
            stride = 2 if b == 0 and stage > 0 else 1
            x = bottleneck(x, width, 256 * 2**stage, stride, f"stage{stage}_block{b}")
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(classes, activation="softmax", dtype="float32", name="predictions")(x)
    return keras.Model(inputs, outputs, name="resnext101")


def main():
    args = parse_args(__doc__, batch_size=2, batch_norm=True)
    keras.utils.set_random_seed(args.seed)
    x, y = images(args.steps * args.batch_size, (224, 224, 3), 1000, seed=args.seed)
    model = build()
    if args.fused_batch_norm:
        from fused_bn import with_fused_batch_norm

        model = with_fused_batch_norm(model)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy())
    model.fit(x, y, batch_size=args.batch_size, epochs=1, verbose=2)


if __name__ == "__main__":
    main()
