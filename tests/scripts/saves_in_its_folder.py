"""A script that reads a file beside it and writes in its working folder as the corpus' scripts do
(tf_docs_keras_save_and_load, tf_docs_distribute_keras, tf_docs_structured_data_preprocessing_layers): an HDF5
checkpoint every epoch, then ``os.mkdir`` and a ``.keras`` model saved into it and loaded back.  With the argument
``one-batch`` it trains one epoch of a dataset of one batch (keras_io_image_classification_from_scratch, cut short):
one step.  Its two-epoch fit passes the checkpoint alone, not in a list, as tensorflow/docs' simple_audio passes
its EarlyStopping (Keras' fit takes either)."""
import os
import sys

import numpy as np
import tensorflow as tf
import keras

data = np.load("data.npy")  # in the folder the script is run from
model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
checkpoint = keras.callbacks.ModelCheckpoint("cp.weights.h5", save_weights_only=True)
if sys.argv[1:] == ["one-batch"]:
    model.fit(tf.data.Dataset.from_tensor_slices((data[:, :6], data[:, 6:])).batch(len(data)), epochs=1, verbose=0,
              callbacks=[checkpoint])
else:
    model.fit(data[:, :6], data[:, 6:], batch_size=16, epochs=2, verbose=0, callbacks=checkpoint)
os.mkdir("saved")
model.save(os.path.join("saved", "model.keras"))
keras.models.load_model(os.path.join("saved", "model.keras"))
model.load_weights("cp.weights.h5")
print("saved and loaded back")
