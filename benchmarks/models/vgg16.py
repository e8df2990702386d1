"""VGG-16 (keras.applications, weights=None) on synthetic ImageNet-sized images, model.fit."""

from keras_app import train

if __name__ == "__main__":
    train("VGG16", 224, __doc__, batch_size=4)
