"""ResNet-50 (keras.applications, weights=None) on synthetic ImageNet-sized images, model.fit."""

from keras_app import train

if __name__ == "__main__":
    train("ResNet50", 224, __doc__, batch_size=8)
