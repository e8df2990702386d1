"""A tf.data pipeline's host work (reading and decoding files, resizing images) is recorded at capture, and the
report says it is not priced; an in-memory pipeline records nothing."""

import json

import jsonschema
import pytest

from autodist.cli import placement_main
from autodist.report import schema

# keras.io's image_classification_from_scratch and the TensorFlow load-images tutorial read JPEG files this way
# (corpus: keras_io_image_classification_from_scratch, tf_docs_images_transfer_learning).
SCRIPT = """
import os
import sys

import keras
import numpy as np
import tensorflow as tf

folder = sys.argv[1]
if sys.argv[2] == "files":
    paths = []
    for i in range(4):
        paths.append(os.path.join(folder, f"{i}.jpg"))
        tf.io.write_file(paths[-1], tf.io.encode_jpeg(tf.zeros((40, 40, 3), tf.uint8)))

    def load(path):
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=3)
        return tf.image.resize(image, (32, 32)) / 255.0, 0

    data = tf.data.Dataset.from_tensor_slices(paths).map(load).batch(2)
else:
    data = tf.data.Dataset.from_tensor_slices((np.zeros((4, 32, 32, 3), "float32"), np.zeros(4, "int32"))).batch(2)
model = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(2)])
model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(data, epochs=1)
"""


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    from autodist.graph.capture import capture_script

    folder = tmp_path_factory.mktemp("pipeline")
    script = folder / "train.py"
    script.write_text(SCRIPT)
    out = {}
    for kind in ("files", "arrays"):
        out[kind] = folder / f"{kind}.json"
        capture_script(str(script), [str(folder), kind]).save(out[kind])
    return out


def _report(capsys, graph, *extra):
    with pytest.raises(SystemExit) as done:
        placement_main(["report", str(graph), "--preset", "dgx-h100:1", "--moves", "20", *extra])
    out, err = capsys.readouterr()
    assert done.value.code == 0, err
    return out


def test_reading_and_decoding_files_is_recorded_and_reported_as_not_priced(capsys, captured):
    from autodist.graph.item import GraphItem

    assert GraphItem.load(captured["files"]).job.input_pipeline == ["DecodeJpeg", "ReadFile", "ResizeBilinear"]
    doc = json.loads(_report(capsys, captured["files"], "--format", "json"))
    jsonschema.validate(doc, schema())
    assert doc["job"]["input_pipeline"] == ["DecodeJpeg", "ReadFile", "ResizeBilinear"]
    text = " ".join(_report(capsys, captured["files"]).split())
    assert ("Input: the script's tf.data pipeline runs DecodeJpeg, ReadFile, ResizeBilinear on the host CPUs for "
            "every batch. It is not priced") in text


def test_an_in_memory_pipeline_records_nothing(capsys, captured):
    from autodist.graph.item import GraphItem

    assert GraphItem.load(captured["arrays"]).job.input_pipeline == []
    assert "Input:" not in _report(capsys, captured["arrays"])
    assert "input_pipeline" not in json.loads(_report(capsys, captured["arrays"], "--format", "json"))["job"]
