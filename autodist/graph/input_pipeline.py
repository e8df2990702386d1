"""What a step's tf.data input pipeline runs on the host, as far as its ops show (needs TensorFlow).

Keras' ``fit`` takes its batches from a ``tf.data.Dataset`` that runs on the
host CPUs: reading files, decoding images, parsing records and resizing take
host time that the step model does not price (cost_models prices the step
on its devices, its batch given).  Capture records the costly op types the
pipeline's functions (``map``, ``filter``, ``interleave``, ...) and sources
hold, so that the report says the input is not priced instead of assuming
it free in silence.
"""

from __future__ import annotations

# Host work per element or record: reading, decoding and parsing, resizing and warping images, string processing,
# Python callbacks; and the dataset sources that read files.
HOST_HEAVY = frozenset({
    "ReadFile", "DecodeJpeg", "DecodePng", "DecodeImage", "DecodeBmp", "DecodeGif", "DecodeAndCropJpeg",
    "DecodeWebP", "DecodeRaw", "DecodeCSV", "DecodeWav", "DecodeProtoV2", "ParseExampleV2", "ParseSingleExample",
    "ParseSequenceExampleV2", "ResizeBilinear", "ResizeBicubic", "ResizeNearestNeighbor", "ResizeArea",
    "ScaleAndTranslate", "CropAndResize", "ImageProjectiveTransformV3", "StringSplitV2", "RegexReplace",
    "StaticRegexReplace", "StringLower", "UnicodeDecodeWithOffsets", "LookupTableFindV2", "PyFunc", "EagerPyFunc",
    "TFRecordDataset", "TextLineDataset", "FixedLengthRecordDataset",
})
# Dataset classes that read files, by the op their source runs.
_SOURCES = {"TFRecordDatasetV2": "TFRecordDataset", "_TFRecordDataset": "TFRecordDataset",
            "TextLineDatasetV2": "TextLineDataset", "_TextLineDataset": "TextLineDataset",
            "FixedLengthRecordDatasetV2": "FixedLengthRecordDataset",
            "_FixedLengthRecordDataset": "FixedLengthRecordDataset"}


def host_op_types(dataset):
    """The :data:`HOST_HEAVY` op types that ``dataset`` (a ``tf.data.Dataset``) and the datasets it reads from run,
    sorted: their sources' and their functions' (a function's graph as traced, its nested calls left out)."""
    found, seen, pending = set(), set(), [dataset]
    while pending:
        ds = pending.pop()
        if id(ds) in seen:
            continue
        seen.add(id(ds))
        found.add(_SOURCES.get(type(ds).__name__, ""))
        for value in vars(ds).values():
            graph = getattr(getattr(value, "function", None), "graph", None)  # a map's, filter's, ... function
            if graph is not None:
                found.update(op.type for op in graph.get_operations())
        pending.extend(ds._inputs())
    return sorted(found & HOST_HEAVY)
